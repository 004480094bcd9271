package plugins

import (
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// global is a module's fuel global, for the tank's tests.
type global struct {
	api.MutableGlobal
	v uint64
}

func (g *global) Get() uint64  { return g.v }
func (g *global) Set(v uint64) { g.v = v }

// TestTankSettles: a call that returns below zero with no fuel left to
// give (its last charges, which no test followed) ran out of fuel; one
// below zero with fuel left did not, and is charged its overdraw.
func TestTankSettles(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit, left int64 // the call's fuel, and the global when it returns
		out         bool
		used        int64
	}{
		{"within", 1000, 1, false, 999},
		{"to the unit", 1000, 0, false, 1000},
		{"over, none left", 1000, -7, true, 1007},
		{"over, a slice left", 3 * fuelSlice, -7, false, fuelSlice + 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := &tank{g: &global{}}
			tk.fill(tc.limit)
			tk.g.Set(uint64(tc.left))
			if out := tk.settle(); out != tc.out || tk.exhausted() != tc.out {
				t.Errorf("settle: %v, exhausted: %v; want %v", out, tk.exhausted(), tc.out)
			}
			if used := tk.used(); used != tc.used {
				t.Errorf("used %d, want %d", used, tc.used)
			}
		})
	}
	var none *tank
	if none.settle() {
		t.Error("a module loaded unmetered ran out of fuel")
	}
}
