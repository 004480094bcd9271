package plugins_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// waitStats waits (a guard against a hang, not a speed check) until the
// module's counters satisfy ok.
func waitStats(t *testing.T, m *plugins.Module, what string, ok func(plugins.ModuleStats) bool) plugins.ModuleStats {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		s := m.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never; the module's counters: %+v", what, s)
		}
	}
}

// TestWarmInstances: a module with WarmInstances keeps that many idle
// instances ready: made once it is loaded, so that a burst of calls pays
// no instantiation; and made again after a failure threw one away. Bad
// values are refused.
func TestWarmInstances(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{Instances: 4, WarmInstances: 3})
	waitStats(t, m, "three idle instances after the load", func(s plugins.ModuleStats) bool { return s.Idle == 3 })
	// byCalls counts the instances a call made (none idle): the
	// background's are Warmed. (While one call of the burst is back and
	// another still runs, fewer than three are idle and the pool may make
	// one more in the background: that is its work, not a call's.)
	byCalls := func(s plugins.ModuleStats) int64 { return s.Instantiated - s.Warmed }
	before := m.Stats()
	if before.Warmed != 2 {
		t.Errorf("the load made %d instances in the background, want 2 beside its own: %+v", before.Warmed, before)
	}

	// A burst of three calls at once finds its instances ready.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := callTool(t, m, "echo", `{"a":1}`); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if s := m.Stats(); byCalls(s) != byCalls(before) {
		t.Errorf("the burst's calls made %d instances, want none (warm: %+v)", byCalls(s)-byCalls(before), s)
	}

	// A trap throws its instance away; the pool makes up for it in the
	// background, not the next call.
	before = waitStats(t, m, "the pool settled after the burst", func(s plugins.ModuleStats) bool { return s.Idle >= 3 })
	if _, err := callTool(t, m, "trap", `{}`); !errors.Is(err, plugins.ErrTrap) {
		t.Fatalf("trap: %v", err)
	}
	s := waitStats(t, m, "three idle instances after the trap", func(s plugins.ModuleStats) bool { return s.Idle >= 3 && s.Discarded == 1 })
	if byCalls(s) != byCalls(before) {
		t.Errorf("after the trap, the calls made %d instances, want none", byCalls(s)-byCalls(before))
	}
	if before.Idle == 3 && s.Warmed != before.Warmed+1 {
		t.Errorf("after the trap, %d instances made in the background, want one", s.Warmed-before.Warmed)
	}

	// Without WarmInstances, the load's first instance only.
	cold := load(t, rt, "cold", hostileWasm(t), plugins.Limits{Instances: 4})
	if s := cold.Stats(); s.Instantiated != 1 || s.Idle != 1 || s.Warmed != 0 {
		t.Errorf("without WarmInstances: %+v, want the load's one instance", s)
	}

	for _, l := range []plugins.Limits{{WarmInstances: -1}, {Instances: 2, WarmInstances: 3}} {
		if _, err := rt.Load(context.Background(), plugins.Source{Name: "bad", Wasm: hostileWasm(t), Limits: l}); !errors.Is(err, plugins.ErrInvalidLimits) {
			t.Errorf("%+v: %v, want ErrInvalidLimits", l, err)
		}
	}
}
