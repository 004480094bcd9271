package plugins_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// TestOutOfFuel: a call that spins past Limits.Fuel fails with
// ErrOutOfFuel (out_of_fuel), well before its timeout; its instance is
// discarded and the next call runs.
func TestOutOfFuel(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{Instances: 1, CallTimeout: 2 * time.Minute, Fuel: 20_000_000})
	before := m.Stats()
	start := time.Now()
	res, err := callTool(t, m, "spin", `{}`)
	if res.Fuel < 20_000_000 {
		t.Errorf("the failed call's result says %d fuel, want all 20,000,000", res.Fuel)
	}
	var pe *plugins.PluginError
	if !errors.Is(err, plugins.ErrOutOfFuel) || !errors.As(err, &pe) || pe.ErrorType() != "out_of_fuel" {
		t.Fatalf("spin: %v, want ErrOutOfFuel (out_of_fuel)", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("spin ran %v on 20,000,000 fuel", took)
	}
	after := m.Stats()
	if after.Discarded != before.Discarded+1 {
		t.Errorf("discarded %d instances, want 1", after.Discarded-before.Discarded)
	}
	if used := after.Fuel - before.Fuel; used < 20_000_000 {
		t.Errorf("the call that ran out used %d fuel, want all 20,000,000", used)
	}
	if _, err := callTool(t, m, "ok", `{}`); err != nil {
		t.Fatalf("the call after: %v", err)
	}
}

// TestFuelIsDeterministic: a call of a guest whose state a call does not
// change (C without a collector) uses the same fuel every time, and one
// that does more work uses more. (A guest with a garbage collector, Go's
// or AssemblyScript's, works more on some calls than others as its heap
// fills; Go's runtime reads the clock and randomness too: such calls vary
// by a fraction.)
func TestFuelIsDeterministic(t *testing.T) {
	rt, _ := newRuntime(t)
	for _, tc := range []struct {
		name       string
		wasm       []byte
		tool       string
		small, big string
	}{
		{"echo", cEchoWasm(t), "echo", `{"x":"y"}`, `{"x":"` + strings.Repeat("y", 20_000) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := load(t, rt, tc.name, tc.wasm, plugins.Limits{Instances: 1})
			used := func(input string) int64 {
				before := m.Stats().Fuel
				res, err := callTool(t, m, tc.tool, input)
				if err != nil {
					t.Fatal(err)
				}
				delta := m.Stats().Fuel - before
				if res.Fuel != delta {
					t.Fatalf("the tool result says %d fuel, the module's stats %d", res.Fuel, delta)
				}
				return delta
			}
			used(tc.small) // the instance's first call initialises the guest
			small := used(tc.small)
			for range 3 {
				if again := used(tc.small); again != small {
					t.Fatalf("the same call used %d fuel, then %d", small, again)
				}
			}
			big := used(tc.big)
			if small <= 0 || big <= 2*small {
				t.Fatalf("a small call used %d fuel, a big one %d", small, big)
			}
			t.Logf("%s: %d fuel a warm call, %d with a larger input", tc.name, small, big)
		})
	}
}
