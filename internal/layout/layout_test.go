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
	"host/ledger":         {},
	"host/provider":       {"host/ledger"},
	"storage":             {"host/ledger"},
	"storage/memory":      {"storage", "host/ledger"},
	"storage/file":        {"storage", "host/ledger"},
	"storage/storagetest": {"storage", "host/ledger"},
	"storage/redis":       {"storage", "host/ledger"},
	"host":                {"host/ledger", "host/provider", "storage"},
	"internal/fakemodel":  {"internal/fixtures"},
	"plugins":             {"host", "host/ledger", "host/provider", "storage"},
	"internal/mcpserver":  {"plugins", "host", "host/ledger", "host/provider", "storage"},
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
