package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// widenWasm builds testdata/c/widen.c with defines (each "NAME=VALUE" or
// "NAME").
func widenWasm(t testing.TB, defines ...string) []byte {
	flags := make([]string, len(defines))
	for i, d := range defines {
		flags[i] = "-D" + d
	}
	return plugintest.CPlugin(t, "testdata/c", []string{"widen.c", cKit + "/agentic.c"}, []string{cKit}, flags)
}

// reportOf calls the registry's report tool and returns the version that
// answered.
func reportOf(t *testing.T, reg *plugins.Registry) string {
	t.Helper()
	tool, ok := reg.Tool("acme", "report")
	if !ok {
		t.Fatal("no report tool")
	}
	res, err := tool.Call(context.Background(), hostCall("report", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	return res.Output
}

// TestHoldWidening: under HoldWidening, a new version of a module that
// widens the one serving — a new tool, an effect moved either way, a
// changed description or schema, a tool now idempotent — is held, not
// loaded, with what it widens; the old version serves on, until the held
// one is approved (it then replaces it) or discarded. A version that only
// narrows (a tool dropped) or changes nothing a caller sees loads at once.
func TestHoldWidening(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	base := widenWasm(t)
	for _, tc := range []struct {
		name    string
		defines []string
		held    string // the widening, "" when the version loads at once
	}{
		{"new tool", []string{"EXTRA"}, "tool extra: new"},
		{"effect widens", []string{`EFFECT="external"`}, "tool report: effect read → external"},
		{"description", []string{`DESC="Report the version, and more."`}, "tool report: description"},
		{"schema", []string{`SCHEMA="{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}"`}, "tool report: input_schema"},
		{"idempotent", []string{"IDEMPOTENT=1"}, "tool report: idempotent"},
		{"narrows", []string{"NO_SECOND"}, ""},
		{"same offer", []string{`VERSION="B"`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var changes []plugins.Change
			reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true, OnChange: func(c plugins.Change) { changes = append(changes, c) }})
			t.Cleanup(func() { reg.Close(ctx) })
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: base}); err != nil {
				t.Fatal(err)
			}
			next := widenWasm(t, append([]string{`VERSION="B"`}, tc.defines...)...)
			_, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: next})
			if tc.held == "" {
				if err != nil || reportOf(t, reg) != `{"version":"B"}` || len(reg.Held("acme")) != 0 {
					t.Fatalf("a version that does not widen: %v, %s, held %+v; want it loaded", err, reportOf(t, reg), reg.Held("acme"))
				}
				return
			}
			var he *plugins.HeldError
			if !errors.Is(err, plugins.ErrHeld) || !errors.As(err, &he) || !strings.Contains(err.Error(), tc.held) {
				t.Fatalf("a widening version: %v, want it held for %q", err, tc.held)
			}
			if got := reportOf(t, reg); got != `{"version":"A"}` {
				t.Fatalf("while held, %s answered; want the old version", got)
			}
			held := reg.Held("acme")
			if len(held) != 1 || held[0].Name != "w" || held[0].Hash != he.Version.Hash || held[0].Previous == "" || len(held[0].Widenings) == 0 {
				t.Fatalf("held %+v", held)
			}
			if last := changes[len(changes)-1]; last.Kind != plugins.Held || last.Hash != held[0].Hash || len(last.Widenings) == 0 {
				t.Errorf("the change %+v, want held", last)
			}
			// Loading the same version again (a directory rescanned) keeps
			// it held, once; so does loading again the version serving.
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: next}); !errors.Is(err, plugins.ErrHeld) || len(reg.Held("acme")) != 1 {
				t.Fatalf("the same version again: %v, held %+v", err, reg.Held("acme"))
			}
			if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: base}); err != nil || len(reg.Held("acme")) != 1 {
				t.Fatalf("the version serving again: %v, held %+v", err, reg.Held("acme"))
			}
			if _, err := reg.ApproveHeld(ctx, "acme", "w", "sha256:nope"); err == nil {
				t.Error("approved a version that is not held")
			}
			if tc.name == "description" {
				if !reg.DiscardHeld(ctx, "acme", "w", held[0].Hash) || len(reg.Held("acme")) != 0 || reportOf(t, reg) != `{"version":"A"}` {
					t.Fatal("discarding the held version")
				}
				return
			}
			if _, err := reg.ApproveHeld(ctx, "acme", "w", held[0].Hash); err != nil {
				t.Fatal(err)
			}
			if got := reportOf(t, reg); got != `{"version":"B"}` || len(reg.Held("acme")) != 0 {
				t.Fatalf("after the approval, %s answered, held %+v; want the new version", got, reg.Held("acme"))
			}
			if last := changes[len(changes)-1]; last.Kind != plugins.Replaced {
				t.Errorf("the change %+v, want replaced", last)
			}
		})
	}

	// Without HoldWidening, every valid version loads.
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	t.Cleanup(func() { reg.Close(ctx) })
	for _, w := range [][]byte{base, widenWasm(t, `VERSION="B"`, "EXTRA")} {
		if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: w}); err != nil {
			t.Fatal(err)
		}
	}
	if got := reportOf(t, reg); got != `{"version":"B"}` {
		t.Errorf("without HoldWidening, %s answered", got)
	}
}

// TestWidenings: what counts as widening, on descriptions: an effect that
// drops is held too (its calls would skip their approvals); a validator's
// schema, a new policy and a policy's description widen; a timeout, a
// dropped item and whitespace in a schema do not.
func TestWidenings(t *testing.T) {
	prev := plugins.Description{
		Tools:      []plugins.ToolDescription{{Name: "pay", Description: "Pay.", Effect: host.EffectExternal, InputSchema: json.RawMessage(`{"type":"object"}`), TimeoutMS: 1000}},
		Validators: []plugins.ValidatorDescription{{Name: "v", Schema: json.RawMessage(`{"type":"object","required":["a"]}`)}},
		Policies:   []plugins.PolicyDescription{{Name: "p", Description: "Decides."}, {Name: "gone"}},
	}
	next := plugins.Description{
		Tools:      []plugins.ToolDescription{{Name: "pay", Description: "Pay.", Effect: host.EffectRead, InputSchema: json.RawMessage(` { "type" : "object" } `), TimeoutMS: 500}},
		Validators: []plugins.ValidatorDescription{{Name: "v", Schema: json.RawMessage(`{"type":"object"}`)}},
		Policies:   []plugins.PolicyDescription{{Name: "p", Description: "Decides more."}, {Name: "new"}},
	}
	var got []string
	for _, w := range plugins.Widenings(prev, next) {
		got = append(got, w.String())
	}
	want := []string{"tool pay: effect external → read", "validator v: schema", "policy p: description", "policy new: new"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("widenings %q, want %q", got, want)
	}
	if w := plugins.Widenings(prev, prev); w != nil {
		t.Errorf("the same description widens: %v", w)
	}
}
