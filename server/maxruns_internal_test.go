package server

import (
	"strings"
	"testing"
)

// TestMaxRunsDefault: max_runs defaults to 4096, or a quarter of the
// process's file descriptor limit when that is lower; a negative bound is
// refused.
func TestMaxRunsDefault(t *testing.T) {
	cfg, _ := Config{}.normalized()
	want := DefaultMaxRuns
	if n := openFileLimit(); n > 0 && n/4 < want {
		want = max(1, n/4)
	}
	if cfg.MaxRuns != want {
		t.Errorf("default max_runs %d, want %d (descriptor limit %d)", cfg.MaxRuns, want, openFileLimit())
	}
	if cfg, _ := (Config{MaxRuns: 7}).normalized(); cfg.MaxRuns != 7 {
		t.Errorf("max_runs 7 normalized to %d", cfg.MaxRuns)
	}
	if _, err := (Config{QueueRuns: -1}).normalized(); err == nil || !strings.Contains(err.Error(), "queue_runs -1 and queue_timeout 0s: want neither negative") {
		t.Errorf("queue_runs -1: %v, want refused", err)
	}
	if _, err := (Config{MaxRuns: -1}).normalized(); err == nil || !strings.Contains(err.Error(), "max_runs -1 is negative") {
		t.Errorf("max_runs -1: %v, want refused", err)
	}
}
