package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/protocol/mcpclient"
)

// addTools adds n tools to srv, named prefix0, prefix1, ….
func addTools(srv *mcp.Server, prefix string, n int) {
	for i := range n {
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("%s%d", prefix, i), Description: "A tool.", InputSchema: objectSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("ok"), nil })
	}
}

// disconnects opens s and returns the error of its first connection:
// that of its first Disconnected change, nil when it connected.
func disconnects(t *testing.T, s mcpclient.Server) (*mcpclient.Source, error) {
	t.Helper()
	errs := make(chan error, 1)
	s.OnChange = func(c mcpclient.Change) {
		if c.Kind == mcpclient.Disconnected || c.Kind == mcpclient.Connected {
			select {
			case errs <- c.Err:
			default:
			}
		}
	}
	src := open(t, s)
	return src, <-errs
}

// TestToolCountBound: a server listing more tools than MaxTools is
// refused whole, with a *LimitError (ErrTooManyTools) that Status shows;
// none of its tools serves. Exactly MaxTools serve.
func TestToolCountBound(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "many", Version: "1"}, nil)
	addTools(srv, "t", 10000)
	ts := serve(t, srv, nil)
	src, err := disconnects(t, mcpclient.Server{Name: "many", URL: ts.URL})
	var le *mcpclient.LimitError
	if !errors.Is(err, mcpclient.ErrTooManyTools) || !errors.As(err, &le) || le.Max != mcpclient.DefaultMaxTools {
		t.Fatalf("10,000 tools: %v, want a LimitError", err)
	}
	if st := src.Status(); st.Connected || st.Tools != 0 || !strings.Contains(st.LastError, "more than 128 tools") {
		t.Errorf("status %+v", st)
	}

	few := mcp.NewServer(&mcp.Implementation{Name: "few", Version: "1"}, nil)
	addTools(few, "t", 5)
	ts = serve(t, few, nil)
	if st := open(t, mcpclient.Server{Name: "few", URL: ts.URL, MaxTools: 5}).Status(); !st.Connected || st.Tools != 5 {
		t.Errorf("exactly MaxTools: %+v", st)
	}
	if _, err := disconnects(t, mcpclient.Server{Name: "few", URL: ts.URL, MaxTools: 4}); !errors.Is(err, mcpclient.ErrTooManyTools) {
		t.Errorf("one past MaxTools: %v", err)
	}
}

// definitionSize is the bytes of the definition of a tool named name, of
// objectSchema, whose description is desc, as the Source measures it.
func definitionSize(name, desc string) int {
	schema, _ := json.Marshal(objectSchema)
	b, _ := json.Marshal(mcpclient.Definition{Name: name, Description: desc, InputSchema: schema})
	return len(b)
}

// TestDefinitionBound: a tool whose definition is larger than
// MaxDefinitionBytes is refused — not served, not pinned, named in
// Status.Refused with the reason — and the others serve; one of exactly
// the bound serves. A description past the answer's bound refuses the
// listing (ErrTooLarge). A refused tool that later fits is new: held.
func TestDefinitionBound(t *testing.T) {
	const limit = 4096
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	add := func(name string, size int) {
		desc := strings.Repeat("d", size-(definitionSize(name, "d")-1))
		srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: objectSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("ok"), nil })
	}
	add("fits", limit)
	add("over", limit+1)
	add("small", 200)
	ts := serve(t, srv, nil)
	src := open(t, mcpclient.Server{Name: "big", URL: ts.URL, MaxDefinitionBytes: limit})
	if got := namesOf(src); !slices.Equal(got, []string{"big__fits", "big__small"}) {
		t.Errorf("serving %v", got)
	}
	st := src.Status()
	if len(st.Refused) != 1 || st.Refused[0].Name != "over" || !strings.Contains(st.Refused[0].Reason, "4097 bytes") || !strings.Contains(st.Refused[0].Reason, "MaxDefinitionBytes") {
		t.Errorf("refused %+v", st.Refused)
	}
	if _, pinned := src.Pins()["over"]; pinned {
		t.Error("a refused definition is pinned")
	}
	add("over", 300) // it fits now, and is new
	waitFor(t, "over held", func() bool { h := src.Held(); return len(h) == 1 && h[0].Name == "over" })
	if slices.Contains(namesOf(src), "big__over") || len(src.Status().Refused) != 0 {
		t.Errorf("serving %v, refused %v", namesOf(src), src.Status().Refused)
	}

	huge := mcp.NewServer(&mcp.Implementation{Name: "huge", Version: "1"}, nil)
	huge.AddTool(&mcp.Tool{Name: "huge", Description: strings.Repeat("d", 30<<20), InputSchema: objectSchema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return textResult("ok"), nil })
	ts = serve(t, huge, nil)
	if _, err := disconnects(t, mcpclient.Server{Name: "huge", URL: ts.URL}); !errors.Is(err, mcpclient.ErrTooLarge) {
		t.Errorf("a 30 MiB description: %v, want ErrTooLarge", err)
	}
}

// TestToolNames: a tool whose name the providers would not take, once
// prefixed — empty, a dot, not ASCII, past 64 characters — is refused and
// named in Status.Refused, as is a name the server lists twice (neither
// definition serves: which one would the model get?); the others serve.
func TestToolNames(t *testing.T) {
	long := strings.Repeat("n", 64-len("docs__")+1)
	tools := []string{``, `a.b`, `ünicode`, `dup`, `dup`, long, `ok`, strings.Repeat("m", 64-len("docs__"))}
	url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
		if req.Method != "tools/list" {
			return false
		}
		var list []map[string]any
		for i, name := range tools {
			list = append(list, map[string]any{"name": name, "description": fmt.Sprint("tool ", i), "inputSchema": map[string]any{"type": "object"}})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{"tools": list}})
		return true
	})
	src := open(t, mcpclient.Server{Name: "docs", URL: url})
	if got := namesOf(src); !slices.Equal(got, []string{"docs__" + strings.Repeat("m", 58), "docs__ok"}) {
		t.Errorf("serving %v", got)
	}
	want := map[string]string{``: "empty", `a.b`: "[A-Za-z0-9_-]", `ünicode`: "[A-Za-z0-9_-]", `dup`: "lists it twice", long: "longer than 64"}
	refused := src.Status().Refused
	if len(refused) != len(want) {
		t.Errorf("refused %+v", refused)
	}
	for _, r := range refused {
		if w, ok := want[r.Name]; !ok || !strings.Contains(r.Reason, w) {
			t.Errorf("refused %q: %s; want the reason to say %q", r.Name, r.Reason, w)
		}
	}
}

// TestCollisions: servers whose tools could take one name — two of one
// name, or a prefix that begins another ("a" + "b__c" and "a__b" + "c" are
// both a__b__c) — are refused before any connection, every pair named;
// prefixes that cannot meet pass.
func TestCollisions(t *testing.T) {
	err := mcpclient.Collisions(
		mcpclient.Server{Name: "a", URL: "http://x"}, mcpclient.Server{Name: "a__b", URL: "http://y"},
		mcpclient.Server{Name: "c", URL: "http://x"}, mcpclient.Server{Name: "c_", Command: []string{"x"}},
		mcpclient.Server{Name: "d", URL: "http://x", Prefix: "x"}, mcpclient.Server{Name: "e", URL: "http://x", Prefix: "xy"},
		mcpclient.Server{Name: "f", URL: "http://x"}, mcpclient.Server{Name: "f", URL: "http://x"},
		mcpclient.Server{Name: "g", URL: "http://x"}, mcpclient.Server{Name: "gh", URL: "http://x"}, mcpclient.Server{Name: "g-h", URL: "http://x"})
	for _, want := range []string{"a (a__) and a__b (a__b__)", "c (c__) and c_ (c___)", "d (x) and e (xy)", "f (f__) and f (f__)"} {
		if !errors.Is(err, mcpclient.ErrInvalidServer) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "g (") {
		t.Errorf("%v refuses g, gh and g-h, which cannot meet", err)
	}
	if err := mcpclient.Collisions(mcpclient.Server{Name: "docs"}, mcpclient.Server{Name: "mail"}); err != nil {
		t.Errorf("two servers apart: %v", err)
	}
}
