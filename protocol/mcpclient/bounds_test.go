package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
