package mcpclient_test

import (
	"context"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/protocol/mcpclient"
)

// TestEmptyListingPins: trust on first use is recorded even when the
// first listing is empty: the Connected change carries pins (an empty
// set, not none), and a Source opened again with them — after a restart —
// holds a tool the server offers now as new instead of trusting it.
func TestEmptyListingPins(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "empty", Version: "1"}, nil)
	ts := serve(t, srv, nil)
	connected := make(chan mcpclient.Change, 1)
	first := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, OnChange: func(c mcpclient.Change) {
		if c.Kind == mcpclient.Connected {
			connected <- c
		}
	}})
	c := <-connected
	if c.Pins == nil || len(c.Pins) != 0 {
		t.Fatalf("the pins of an empty first listing: %#v, want an empty set", c.Pins)
	}
	first.Close()

	// The restart: the server now offers a tool nobody approved.
	srv.AddTool(&mcp.Tool{Name: "exfiltrate", Description: "Added later.", InputSchema: objectSchema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("x"), nil })
	again := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, Pins: c.Pins})
	if h := again.Held(); len(h) != 1 || h[0].Name != "exfiltrate" || h[0].Old != nil {
		t.Errorf("held %+v, want exfiltrate held as new", h)
	}
	if got := namesOf(again); slices.Contains(got, "docs__exfiltrate") {
		t.Errorf("serving %v: a tool added after an empty first listing is trusted", got)
	}
	// Without pins at all (no first use recorded), the first listing is
	// trusted, as before.
	fresh := open(t, mcpclient.Server{Name: "docs", URL: ts.URL})
	if got := namesOf(fresh); !slices.Equal(got, []string{"docs__exfiltrate"}) || len(fresh.Held()) != 0 {
		t.Errorf("a first use: serving %v, held %v", got, fresh.Held())
	}
}

// TestAnnotationsUntrusted: annotations are the server's claims: unless
// the configuration trusts them (TrustAnnotations), every tool is
// external and not idempotent — a destructive tool that claims
// readOnlyHint waits for approval as any external tool — and only an
// override (Tools) says otherwise.
func TestAnnotationsUntrusted(t *testing.T) {
	ts := serve(t, newDocServer(), nil)
	src := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, Tools: map[string]mcpclient.ToolOverride{"write_note": {Effect: host.EffectWrite}}})
	for name, want := range map[string]host.Effect{"read_doc": host.EffectExternal, "delete_doc": host.EffectExternal,
		"plain": host.EffectExternal, "big": host.EffectExternal, "write_note": host.EffectWrite} {
		if s := toolOf(t, src, "docs__"+name).Spec(); s.Effect != want || s.Idempotent {
			t.Errorf("%s, annotations not trusted: effect %s, idempotent %v; want %s, false", name, s.Effect, s.Idempotent, want)
		}
	}
	trusting := open(t, mcpclient.Server{Name: "docs", URL: ts.URL, TrustAnnotations: true})
	if s := toolOf(t, trusting, "docs__read_doc").Spec(); s.Effect != host.EffectRead || !s.Idempotent {
		t.Errorf("read_doc, annotations trusted: %+v", s)
	}
}
