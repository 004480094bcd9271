package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins"
)

// TestNeeds: a module built with the C kit that says what it needs runs
// with that and no more — it reaches the host it needs, not another its
// sandbox allows — and one that needs more than it is granted is refused,
// naming what is missing. Under HoldWidening, a version that needs a new
// host, or no longer says (and so would take its whole sandbox), is held;
// one that needs less loads at once.
func TestNeeds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	ctx := context.Background()
	// (A host without a port is its scheme's default port: the test
	// server's port is named. 127.0.0.1:9 is a second port it never
	// serves on, which the first version needs and the last does not.)
	h, lh, nine := "127.0.0.1:"+u.Port(), "localhost:"+u.Port(), "127.0.0.1:9"
	sandbox := plugins.Limits{AllowedHosts: []string{h, lh, nine}, AllowPrivateNetwork: true}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true, Limits: func(string) plugins.Limits { return sandbox }})
	t.Cleanup(func() { reg.Close(ctx) })
	needing := func(version, needs string) []byte {
		return widenWasm(t, "FETCH", `VERSION="`+version+`"`, `NEEDS="`+strings.ReplaceAll(needs, `"`, `\"`)+`"`)
	}

	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: needing("A", `{"allowed_hosts":["`+h+`","`+nine+`"],"allow_private_network":true}`)}); err != nil {
		t.Fatal(err)
	}
	m, _ := reg.Module("acme", "w")
	if l := m.Limits(); !slices.Equal(l.AllowedHosts, []string{h, nine}) || !l.AllowPrivateNetwork || l.KV {
		t.Errorf("limits %+v, want what it needs", plugins.GrantOf(l))
	}
	if n := m.Description().Needs; n == nil || !slices.Equal(n.AllowedHosts, []string{h, nine}) {
		t.Errorf("described needs %+v", n)
	}
	fetch := func(host string) string {
		t.Helper()
		tool, ok := reg.Tool("acme", "fetch")
		if !ok {
			t.Fatal("no fetch tool")
		}
		res, err := tool.Call(ctx, hostCall("fetch", `{"method":"GET","url":"http://`+host+":"+u.Port()+`/"}`))
		if err != nil {
			t.Fatal(err)
		}
		return res.Output
	}
	if out := fetch("127.0.0.1"); !strings.Contains(out, `"status":200`) || !strings.Contains(out, "hello") {
		t.Errorf("the host it needs: %s", out)
	}
	if out := fetch("localhost"); !strings.Contains(out, "not among the hosts this plugin may reach") {
		t.Errorf("a host its sandbox allows and it does not need: %s", out)
	}

	// More than it is granted: refused, naming it; the version serving
	// goes on.
	for _, tc := range []struct{ needs, want string }{
		{`{"allowed_hosts":["evil.example.org"]}`, `it needs host "evil.example.org", which it is not granted`},
		{`{"allowed_hosts":["` + h + `"],"kv":true}`, "it needs the key-value store, which it is not granted"},
		{`{"allowed_hosts":["127.0.0.1"]}`, `it needs host "127.0.0.1", which it is not granted`}, // port 80: not granted
		{`{"allowed_hosts":["bad/host"]}`, `needs: allowed_hosts: "bad/host" is not a host`},
	} {
		_, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: needing("A", tc.needs)})
		if !errors.Is(err, plugins.ErrInvalidModule) && !errors.Is(err, plugins.ErrInvalidDescription) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("needs %s: %v, want %q", tc.needs, err, tc.want)
		}
	}
	if out := fetch("127.0.0.1"); !strings.Contains(out, "hello") {
		t.Errorf("after the refusals: %s", out)
	}

	// Widening needs are held; narrowing ones load.
	for _, tc := range []struct {
		name, needs, held string
	}{
		{"a new host", `{"allowed_hosts":["` + h + `","` + nine + `","` + lh + `"],"allow_private_network":true}`, "needs " + lh + ": new host"},
		{"undeclared", "", "needs *: undeclared: the whole grant"},
		{"fewer", `{"allowed_hosts":["` + h + `"],"allow_private_network":true}`, ""},
	} {
		wasm := needing("B", tc.needs)
		if tc.needs == "" {
			wasm = widenWasm(t, "FETCH", `VERSION="B"`)
		}
		_, err := reg.Load(ctx, "acme", plugins.Source{Name: "w", Wasm: wasm})
		if tc.held == "" {
			if err != nil || reportOf(t, reg) != `{"version":"B"}` {
				t.Errorf("%s: %v; want it loaded", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, plugins.ErrHeld) || !strings.Contains(err.Error(), tc.held) || reportOf(t, reg) != `{"version":"A"}` {
			t.Errorf("%s: %v; want it held for %q, the old version serving", tc.name, err, tc.held)
		}
	}
	if out := fetch("127.0.0.1"); !strings.Contains(out, "hello") {
		t.Errorf("the version that needs the host and its port: %s", out)
	}
}

// TestSidecarWidening: a sidecar manifest edited beside the same bytes is
// a new version too: one whose tool's effect moves, or that needs more, is
// held; the same manifest again loads as before, and one that needs less
// loads at once and runs with it.
func TestSidecarWidening(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{HoldWidening: true, Limits: func(string) plugins.Limits { return plugins.Limits{KV: true} }})
	t.Cleanup(func() { reg.Close(ctx) })
	wasm := plainWasm(t)
	sidecar := func(effect, needs string) *plugins.Sidecar {
		t.Helper()
		text := `{"name":"vowels","description":"Count vowels.","export":"count_vowels","effect":"` + effect + `"` + needs + `}`
		s, err := plugins.ParseSidecar([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	load := func(s *plugins.Sidecar) error {
		_, err := reg.Load(ctx, "acme", plugins.Source{Name: "p", Wasm: wasm, Sidecar: s})
		return err
	}
	if err := load(sidecar("read", `,"needs":{"allowed_hosts":[],"kv":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := load(sidecar("read", `,"needs":{"allowed_hosts":[],"kv":true}`)); err != nil || len(reg.Held("acme")) != 0 {
		t.Fatalf("the same manifest again: %v, held %+v", err, reg.Held("acme"))
	}
	for effect, want := range map[string]string{"external": "tool vowels: effect read → external", "read": "needs *: undeclared"} {
		err := load(sidecar(effect, ""))
		held := reg.Held("acme")
		if !errors.Is(err, plugins.ErrHeld) || !strings.Contains(err.Error(), want) || len(held) != 1 || held[0].Fingerprint == "" {
			t.Errorf("effect %s: %v, held %+v; want held for %q", effect, err, held, want)
		}
	}
	if err := load(sidecar("read", `,"needs":{"allowed_hosts":[]}`)); err != nil || len(reg.Held("acme")) != 0 {
		t.Fatalf("a manifest that needs less: %v, held %+v", err, reg.Held("acme"))
	}
	if m, _ := reg.Module("acme", "p"); m.Limits().KV {
		t.Error("the module needs no key-value store and has it")
	}
	if _, err := plugins.ParseSidecar([]byte(`{"tools":[],"needs":{"hosts":["a"]}}`)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("a sidecar's needs with a typo: %v", err)
	}
}

// TestSidecarRoundTrip: a manifest written by MarshalJSON reads back as
// the same manifest, in either of its forms and with or without needs.
func TestSidecarRoundTrip(t *testing.T) {
	for _, src := range []string{
		`{"name":"count_vowels","description":"Count vowels.","input_schema":{"type":"object"},"export":"count_vowels","input_field":"text","effect":"read","idempotent":true,"timeout_ms":1000,"needs":{"allowed_hosts":["api.example.com"],"kv":true}}`,
		`{"tools":[{"name":"a","description":"A.","export":"a","effect":"external"},{"name":"b","description":"B.","export":"b","effect":"write"}]}`,
		`{"tools":[],"needs":{"allowed_hosts":[],"allow_private_network":true}}`,
	} {
		side, err := plugins.ParseSidecar([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(side)
		if err != nil {
			t.Fatal(err)
		}
		again, err := plugins.ParseSidecar(b)
		if err != nil {
			t.Fatalf("%s: written as %s, read back: %v", src, b, err)
		}
		if !reflect.DeepEqual(side, again) {
			t.Errorf("%s: written as %s, read back as %+v, want %+v", src, b, again, side)
		}
	}
}
