package plugins

import (
	"context"
	"testing"
	"time"

	w "github.com/agentichost/agentic/plugins/internal/wasmgen"
)

// TestWarmInstancesWaitForFreeSlots: a warm instance runs the module's
// code (its start function, describe), so it is made only with a slot of
// the host's concurrent calls that no call waits for: while every slot is
// taken, a module loaded with WarmInstances makes none; once a call of it
// ends (and so a slot is free), its pool is filled.
func TestWarmInstancesWaitForFreeSlots(t *testing.T) {
	ctx := context.Background()
	rt, err := NewRuntime(Options{CompileInProcess: true, MaxConcurrentCalls: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	wasm := w.Module{Types: []w.Type{{}}, Funcs: []w.Func{{Type: 0}}, Memory: &w.Memory{Min: 1},
		Exports: []w.Export{w.ExportFunc("go", 0)}}.Encode()

	// Another tenant's call holds the host's only slot.
	if err := rt.calls.acquire(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	m, err := rt.Load(ctx, Source{Name: "warm", Tenant: "acme", Wasm: wasm, Limits: Limits{Instances: 3, WarmInstances: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	settled := func(what string) ModuleStats {
		t.Helper()
		// The round ends by itself: a guard against a hang, not a
		// speed check.
		for deadline := time.Now().Add(time.Minute); m.warming.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the warm round never ended", what)
			}
		}
		return m.Stats()
	}
	if s := settled("the slot taken"); s.Instantiated != 1 {
		t.Fatalf("with every slot of the host taken: %d instances made, want the load's one alone", s.Instantiated)
	}
	rt.calls.release("other")
	if _, err := m.CallExport(ctx, "go", nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); m.Stats().Idle < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool was not filled once a slot was free: %+v", m.Stats())
		}
	}
}
