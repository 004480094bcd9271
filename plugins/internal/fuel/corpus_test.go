package fuel_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/internal/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// corpus returns the .wasm files of wazero's own tests (its spec tests,
// fuzz cases and examples), from the module cache: thousands of modules
// of every shape the runtime supports, valid and not.
func corpus(tb testing.TB) []string {
	tb.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tetratelabs/wazero").Output()
	if err != nil {
		tb.Skipf("wazero's module directory: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".wasm") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		tb.Skipf("no .wasm files under %s", dir)
	}
	return files
}

// everyRule charges every import that takes an i32 from its first i32
// argument and gates it: the rewrite's every path at a call.
func everyRule(t []api.ValueType) fuel.Import {
	rule := fuel.Import{Base: 3, Gate: 9}
	for i, p := range t {
		if p == api.ValueTypeI32 {
			rule.Args = []fuel.ArgCost{{Param: i, Per: 5, Shift: 2}}
			break
		}
	}
	return rule
}

// TestCorpusStaysValid: every module of wazero's corpus that wazero
// compiles compiles once metered, with every option on (imports charged by
// their arguments and gated, the start function exported, tables bounded),
// or is refused with a reason; none is turned into an invalid module, and
// none that wazero refuses is turned into a valid one.
func TestCorpusStaysValid(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a few thousand modules")
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	var valid, invalid, metered, refused int
	for _, f := range corpus(t) {
		wasm, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := r.CompileModule(ctx, wasm)
		if err != nil {
			// Invalid as written: the rewrite must not make it valid.
			invalid++
			if out, err := fuel.Instrument(wasm, fuel.Options{StartExport: "agentic-host:start", MaxTableElements: 1 << 20}); err == nil {
				if cm, err := r.CompileModule(ctx, out); err == nil {
					cm.Close(ctx)
					t.Errorf("%s: invalid as written, valid once metered", filepath.Base(f))
				}
			}
			continue
		}
		valid++
		types := map[string][]api.ValueType{}
		for _, d := range cm.ImportedFunctions() {
			mod, name, _ := d.Import()
			types[mod+"\x00"+name] = d.ParamTypes()
		}
		cm.Close(ctx)
		opts := fuel.Options{
			StartExport:      "agentic-host:start",
			MaxTableElements: 1 << 20,
			Imports: func(module, name string, kind fuel.ImportKind) (fuel.Import, error) {
				if kind != fuel.ImportFunction {
					return fuel.Import{}, nil
				}
				return everyRule(types[module+"\x00"+name]), nil
			},
		}
		out, err := fuel.Instrument(wasm, opts)
		if err != nil {
			refused++
			if os.Getenv("FUEL_CORPUS_WHY") != "" {
				t.Logf("%s: %v", filepath.Base(f), err)
			}
			continue
		}
		cm, err = r.CompileModule(ctx, out)
		if err != nil {
			t.Errorf("%s: wazero compiles it but not its metered form: %v", filepath.Base(f), err)
			continue
		}
		cm.Close(ctx)
		metered++
	}
	t.Logf("%d valid modules: %d metered, %d refused; %d invalid, none made valid", valid, metered, refused, invalid)
	if metered == 0 {
		t.Fatal("no module was metered")
	}
}
