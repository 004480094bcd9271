package server

import (
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// TestQuarantineDefaults: a sandbox that says nothing quarantines a plugin
// after 5 failures within the registry's default window (10 minutes);
// failures: -1 turns quarantine off; a window given is kept.
func TestQuarantineDefaults(t *testing.T) {
	for _, c := range []struct {
		cfg  QuarantineConfig
		want plugins.QuarantinePolicy
	}{
		{QuarantineConfig{}, plugins.QuarantinePolicy{Failures: 5}},
		{QuarantineConfig{Failures: -1}, plugins.QuarantinePolicy{}},
		{QuarantineConfig{Failures: 2, Window: Duration(time.Minute)}, plugins.QuarantinePolicy{Failures: 2, Window: time.Minute}},
	} {
		if got := c.cfg.policy(); got != c.want {
			t.Errorf("%+v: %+v, want %+v", c.cfg, got, c.want)
		}
	}
	if plugins.DefaultQuarantineWindow != 10*time.Minute {
		t.Errorf("the default window is %s, the docs say 10 minutes", plugins.DefaultQuarantineWindow)
	}
}
