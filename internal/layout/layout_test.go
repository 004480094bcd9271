// Package layout_test asserts the project's dependency rule: arrows point
// inward, from the binary to the server and the protocols, to the host, to
// the contracts and the ledger below them all.
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
	// The vocabulary every layer shares sits below all of them.
	"ledger":              {},
	"host/model":          {"ledger"},
	"host/provider":       {"ledger", "host/model"},
	"storage":             {"ledger"},
	"storage/memory":      {"storage", "ledger"},
	"storage/file":        {"storage", "ledger"},
	"storage/storagetest": {"storage", "ledger"},
	"storage/redis":       {"storage", "ledger"},
	"storage/archive":     {"storage", "ledger"},
	"host/internal/hub":   {},
	"host/schema":         {},
	"host/hosttest":       {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory", "internal/fakemodel", "internal/fixtures"},
	"host":                {"ledger", "host/schema", "host/model", "host/internal/hub", "storage"},
	// Evaluation replays recordings on a scratch host over a memory store.
	"host/eval":             {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	"internal/fakemodel":    {"internal/fixtures"},
	"plugins/internal/fuel": {},
	"plugins":               {"plugins/internal/fuel", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	// Pulling modules from OCI registries sits beside the runtime: it
	// hands it a Source, and the plugins package needs no OCI client.
	"plugins/oci": {"plugins", "plugins/internal/fuel", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	// Webhooks implement the host's outbox; the server wires them.
	"webhook": {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage"},
	// Schedules send messages through the host.
	"schedule":  {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage"},
	"retention": {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/archive"},
	// The protocols are siblings: each translates between the host's
	// types and one wire, and none imports another, or the server.
	"protocol/uistream":  {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage"},
	"protocol/mcp":       {"plugins", "plugins/internal/fuel", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
	"protocol/mcpclient": {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage"},
	"protocol/a2a":       {"host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage"},
	// The server routes, authenticates and bounds: it wires the host, the
	// plugins and the protocols; the program gives it the storage and the
	// model.
	"server": {"host/eval", "webhook", "schedule", "retention", "storage/archive", "protocol/uistream", "protocol/mcpclient", "protocol/a2a", "plugins", "plugins/oci", "plugins/internal/fuel", "host", "host/schema", "ledger", "host/model", "host/internal/hub", "storage", "storage/memory"},
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
var selfContained = []string{"host/model", "ledger", "storage", "plugins/internal/fuel"}

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

// TestEveryProtocolHasItsPlace: a package under protocol/ must say what it
// may import above, so that a new protocol cannot lean on the server or on
// a sibling unnoticed.
func TestEveryProtocolHasItsPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", module+"/protocol/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./protocol/...: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Fatal("no package under protocol/")
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, module+"/")
		if _, ok := allowed[rel]; !ok {
			t.Errorf("%s has no rule in allowed: say which project packages it may import", rel)
		}
	}
}
