package plugins_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
)

// TestQuarantine: a module whose calls trap (or run out of fuel) three times
// within the window is quarantined for its tenant alone: its tools and
// policies answer ErrQuarantined without running, its own error answers
// and calls whose caller gave up never counted; loading the same bytes
// again keeps it quarantined, a release or a new version lets it serve.
func TestQuarantine(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	var mu sync.Mutex
	var changes []plugins.Change
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Quarantine: func(string) plugins.QuarantinePolicy {
			return plugins.QuarantinePolicy{Failures: 3, Window: time.Minute}
		},
		// spin ends out of fuel (2e9: a fraction of a second) rather than
		// at a deadline, which a loaded machine's slow 900 KB answer
		// could reach too.
		Limits: func(string) plugins.Limits { return plugins.Limits{CallTimeout: 10 * time.Second, Fuel: 2_000_000_000} },
		OnChange: func(c plugins.Change) {
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		},
	})
	t.Cleanup(func() { reg.Close(ctx) })
	bombs := bombsWasm(t)
	for _, tenant := range []string{"acme", "beta"} {
		if _, err := reg.Load(ctx, tenant, plugins.Source{Name: "b", Wasm: bombs}); err != nil {
			t.Fatal(err)
		}
	}
	call := func(ctx context.Context, tenant, tool string) error {
		tl, ok := reg.Tool(tenant, tool)
		if !ok {
			t.Fatalf("%s: no tool %s", tenant, tool)
		}
		_, err := tl.Call(ctx, hostCall(tool, `{}`))
		return err
	}
	quarantined := func(tenant string) bool { return len(reg.Quarantined(tenant)) > 0 }

	// What says nothing of the module's health does not count.
	for range 4 {
		if err := call(ctx, "acme", "error_answer"); !errors.Is(err, plugins.ErrToolFailed) {
			t.Fatalf("error_answer: %v", err)
		}
		gone, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := call(gone, "acme", "spin")
		cancel()
		if err == nil {
			t.Fatal("spin answered")
		}
	}
	if quarantined("acme") {
		t.Fatalf("quarantined on error answers and abandoned calls: %+v", reg.Quarantined("acme"))
	}

	// A trap, out of fuel, a trap: quarantined.
	for _, tool := range []string{"trap", "spin", "trap"} {
		if err := call(ctx, "acme", tool); err == nil || errors.Is(err, plugins.ErrQuarantined) {
			t.Fatalf("%s: %v, want its own failure", tool, err)
		}
	}
	q := reg.Quarantined("acme")
	if len(q) != 1 || q[0].Name != "b" || q[0].Failures != 3 || !strings.Contains(q[0].Last, "trap") {
		t.Fatalf("quarantined: %+v", q)
	}
	err := call(ctx, "acme", "ok")
	var pe *plugins.PluginError
	if !errors.Is(err, plugins.ErrQuarantined) || !errors.As(err, &pe) || pe.ErrorType() != "quarantined" || !strings.Contains(err.Error(), "a person releases it") {
		t.Fatalf("a call while quarantined: %v", err)
	}
	policy, _ := reg.Policy("acme", "spin")
	if _, err := policy.Decide(ctx, host.PolicyRequest{Tool: host.ToolSpec{Name: "x", Effect: host.EffectRead}}); !errors.Is(err, plugins.ErrQuarantined) {
		t.Errorf("its policy while quarantined: %v", err)
	}
	if err := call(ctx, "beta", "ok"); err != nil || quarantined("beta") {
		t.Errorf("another tenant's copy: %v", err)
	}
	mu.Lock()
	last := changes[len(changes)-1]
	mu.Unlock()
	if last.Kind != plugins.Quarantined || last.Tenant != "acme" || last.Hash != q[0].Hash || last.Err == nil {
		t.Errorf("the change %+v, want quarantined", last)
	}

	// The same bytes again: still quarantined. Released: it serves.
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "b", Wasm: bombs}); err != nil || !quarantined("acme") {
		t.Fatalf("the same version loaded again: %v, quarantined %v", err, quarantined("acme"))
	}
	if err := reg.Release("acme", "b"); err != nil {
		t.Fatal(err)
	}
	if err := call(ctx, "acme", "ok"); err != nil || quarantined("acme") {
		t.Fatalf("after the release: %v", err)
	}
	if err := reg.Release("acme", "b"); err == nil {
		t.Error("released a module not quarantined")
	}

	// Quarantined again, the same bytes loaded again between the
	// failures (as a directory's watcher does after an upload): the
	// count goes on. A new version serves.
	for i := range 3 {
		if i == 2 {
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "b", Wasm: bombs}); err != nil {
				t.Fatal(err)
			}
		}
		call(ctx, "acme", "trap")
	}
	if !quarantined("acme") {
		t.Fatal("not quarantined again: the same version loaded again forgot the failures before it")
	}
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "b", Wasm: append(bombsWasm(t), customSection("v2")...)}); err != nil {
		t.Fatal(err)
	}
	if err := call(ctx, "acme", "ok"); err != nil || quarantined("acme") {
		t.Fatalf("a new version: %v", err)
	}
}

// customSection is a Wasm custom section named name: appended to a module,
// it makes other bytes of the same code.
func customSection(name string) []byte {
	body := append(append([]byte{byte(len(name))}, name...), 0) // a byte of content
	return append([]byte{0, byte(len(body))}, body...)
}

// TestQuarantineOwnTimeout: a call that runs until its own time ends —
// the deadline the host sets as the tool's timeout (host.WithToolTimeout)
// — counts towards quarantine, as a timeout the runtime sets does; one
// whose caller's deadline came first (a run's total time), or whose
// caller cancelled it, does not.
func TestQuarantineOwnTimeout(t *testing.T) {
	rt, _ := newRuntime(t)
	wasm := jsHostileWasm(t)
	spin := func(t *testing.T, bound func(context.Context) (context.Context, context.CancelFunc)) []plugins.Quarantine {
		t.Helper()
		ctx := context.Background()
		reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
			Quarantine: func(string) plugins.QuarantinePolicy {
				return plugins.QuarantinePolicy{Failures: 2, Window: time.Minute}
			},
			// Fuel for far longer than the calls last: they end at a deadline.
			Limits: func(string) plugins.Limits { return plugins.Limits{CallTimeout: time.Minute, Fuel: 1 << 50} },
		})
		t.Cleanup(func() { reg.Close(ctx) })
		if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "hostile_js", Wasm: wasm}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			// An instance made before the deadline starts: the call runs
			// when it begins, however long making one takes.
			ok, _ := reg.Tool("acme", "ok")
			if _, err := ok.Call(ctx, hostCall("ok", `{}`)); err != nil {
				t.Fatalf("ok %d: %v", i+1, err)
			}
			tool, _ := reg.Tool("acme", "spin")
			cctx, cancel := bound(ctx)
			_, err := tool.Call(cctx, hostCall("spin", `{}`))
			cancel()
			if !errors.Is(err, plugins.ErrTimeout) && !errors.Is(err, context.Canceled) {
				t.Fatalf("spin %d: %v, want it interrupted", i+1, err)
			}
		}
		return reg.Quarantined("acme")
	}
	const short = 500 * time.Millisecond
	t.Run("own", func(t *testing.T) {
		if q := spin(t, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return host.WithToolTimeout(ctx, short)
		}); len(q) != 1 {
			t.Errorf("two calls past their own time: quarantined %v, want the module", q)
		}
	})
	t.Run("caller's deadline", func(t *testing.T) {
		if q := spin(t, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, short)
		}); len(q) != 0 {
			t.Errorf("two calls whose caller's deadline came: quarantined %v", q)
		}
	})
	t.Run("caller's deadline first", func(t *testing.T) {
		if q := spin(t, func(ctx context.Context) (context.Context, context.CancelFunc) {
			run, cancelRun := context.WithTimeout(ctx, short)
			call, cancelCall := host.WithToolTimeout(run, time.Minute)
			return call, func() { cancelCall(); cancelRun() }
		}); len(q) != 0 {
			t.Errorf("two calls whose run's deadline came first: quarantined %v", q)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		if q := spin(t, func(ctx context.Context) (context.Context, context.CancelFunc) {
			call, cancelCall := host.WithToolTimeout(ctx, time.Minute)
			time.AfterFunc(short, cancelCall)
			return call, cancelCall
		}); len(q) != 0 {
			t.Errorf("two cancelled calls: quarantined %v", q)
		}
	})
}
