// Package layout_test asserts the project's dependency rule: arrows point
// inward, from the binary to the host to the contracts.
package layout_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/agentichost/agentic"

// allowed lists, per package, the project packages it may depend on
// (directly or not). A package not listed here may depend on anything.
var allowed = map[string][]string{
	"ledger":              {},
	"host/model":          {"ledger"},
	"host/provider":       {"ledger", "host/model"},
	"storage":             {"ledger"},
	"storage/memory":      {"storage", "ledger"},
	"storage/file":        {"storage", "ledger"},
	"storage/storagetest": {"storage", "ledger"},
	"storage/redis":       {"storage", "ledger"},
	"host/internal/hub":   {},
	"host/schema":         {},
	"host/hosttest":       {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory", "internal/fakemodel", "internal/fixtures"},
	"host":                {"ledger", "host/schema", "host/model", "host/internal/hub", "storage"},
	"internal/fakemodel":  {"internal/fixtures"},
	"plugins":             {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	"internal/mcpserver":  {"plugins", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	// The server wires the host, the plugins and a policy of theirs; the
	// program gives it the storage and the model.
	"server": {"internal/mcpserver", "plugins", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
}

func TestDependenciesPointInward(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for pkg, ok := range allowed {
		out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		permitted := map[string]bool{pkg: true}
		for _, p := range ok {
			permitted[p] = true
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ours := strings.CutPrefix(dep, module+"/")
			if !ours {
				continue
			}
			if !permitted[rel] {
				t.Errorf("%s depends on %s, which the layout does not allow", pkg, rel)
			}
		}
	}
}

// selfContained lists packages that depend on nothing outside the standard
// library and the project packages allowed above: the contracts, which
// anything may import without pulling in a client library.
var selfContained = []string{"host/model", "ledger", "storage"}

func TestContractsNeedNoModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range selfContained {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !strings.HasPrefix(dep, module+"/") {
				t.Errorf("%s depends on %s, outside the standard library", pkg, dep)
			}
		}
	}
}
