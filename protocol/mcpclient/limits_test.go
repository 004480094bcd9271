package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/protocol/mcpclient"
)

// rpcRequest is what an interceptor reads of a JSON-RPC request.
type rpcRequest struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// intercept serves srv over streamable HTTP, but a request answer says
// it answers (true) is answered by it instead of the server.
func intercept(t *testing.T, srv *mcp.Server, answer func(w http.ResponseWriter, req rpcRequest) bool) string {
	t.Helper()
	return serve(t, srv, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				var req rpcRequest
				if json.Unmarshal(body, &req) == nil && answer(w, req) {
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}).URL
}

// countingClient is an HTTP client that counts the bytes read of the
// response bodies the server marks X-Counted.
func countingClient(n *atomic.Int64) *http.Client {
	return &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && res.Header.Get("X-Counted") != "" {
			res.Body = &countingBody{ReadCloser: res.Body, n: n}
		}
		return res, err
	})}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// textAnswer writes a JSON-RPC answer to id of a text of n bytes, made as
// it is written (never held whole); as an SSE event when sse, its lines
// padded with a comment of pad bytes.
func textAnswer(w http.ResponseWriter, id json.RawMessage, n int, sse bool) {
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	tail := `"}]}}`
	w.Header().Set("X-Counted", "1")
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
		head, tail = "event: message\ndata: "+head, tail+"\n\n"
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for n > 0 {
		c := chunk[:min(n, len(chunk))]
		if _, err := w.Write(c); err != nil {
			return // the client went away
		}
		n -= len(c)
	}
	io.WriteString(w, tail)
}

// answerSize is the bytes of textAnswer's answer to id of a text of n
// bytes.
func answerSize(id json.RawMessage, n int, sse bool) int {
	size := len(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)) + n + len(`"}]}}`)
	if sse {
		size += len("event: message\ndata: ") + len("\n\n")
	}
	return size
}

// TestAnswerBounds: an answer of the server — a JSON body, one SSE event —
// larger than MaxMessageBytes is refused while it is read, with a
// *LimitError (ErrTooLarge), before much more than the bound is read; one
// of exactly the bound is taken; many small events past the bound in all
// are taken; the Source connects again and serves.
func TestAnswerBounds(t *testing.T) {
	const limit = 256 << 10
	for _, sse := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "sse"}[sse]
		t.Run(name, func(t *testing.T) {
			var size atomic.Int64 // the bytes of the next answer to "big"
			var read atomic.Int64
			url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
				if req.Method != "tools/call" || req.Params.Name != "big" {
					return false
				}
				want := int(size.Load())
				textAnswer(w, req.ID, want-answerSize(req.ID, 0, sse), sse)
				return true
			})
			src := open(t, mcpclient.Server{Name: "docs", URL: url, HTTPClient: countingClient(&read), MaxMessageBytes: limit})
			huge := toolOf(t, src, "docs__big") // answered by the interceptor

			size.Store(limit)
			if res, err := call(t, huge, `{}`); err != nil || !strings.HasPrefix(res.Output, "xxx") {
				t.Fatalf("an answer of exactly the bound: %.40q %v", res.Output, err)
			}
			for _, n := range []int64{limit + 1, 64 << 20} {
				size.Store(n)
				read.Store(0)
				_, err := call(t, huge, `{}`)
				var le *mcpclient.LimitError
				if !errors.Is(err, mcpclient.ErrTooLarge) || !errors.As(err, &le) || le.Max != limit || le.Server != "docs" {
					t.Fatalf("an answer of %d bytes: %v, want a LimitError", n, err)
				}
				if got := read.Load(); got > limit+64<<10 {
					t.Errorf("an answer of %d bytes: %d read before it was refused", n, got)
				}
			}
			waitFor(t, "a call answered again", func() bool {
				res, err := call(t, toolOf(t, src, "docs__read_doc"), `{"id":"3"}`)
				return err == nil && res.Output == "document 3: hello"
			})
		})
	}
	t.Run("sse-many-events", func(t *testing.T) {
		url := intercept(t, newDocServer(), func(w http.ResponseWriter, req rpcRequest) bool {
			if req.Method != "tools/call" || req.Params.Name != "big" {
				return false
			}
			w.Header().Set("Content-Type", "text/event-stream")
			pad := ": " + strings.Repeat("p", 1000) + "\n\n" // an event with no data: ignored
			for range 4 * limit / len(pad) {
				io.WriteString(w, pad)
			}
			textAnswer(w, req.ID, 100, true)
			return true
		})
		src := open(t, mcpclient.Server{Name: "docs", URL: url, MaxMessageBytes: limit})
		if res, err := call(t, toolOf(t, src, "docs__big"), `{}`); err != nil || res.Output != strings.Repeat("x", 100) {
			t.Fatalf("small events past the bound in all: %.40q %v", res.Output, err)
		}
	})
}

// hostileServerArg makes the test binary newHostileServer over stdio.
const hostileServerArg = "-mcpclient-hostile-server"

// newHostileServer is an MCP server whose tools answer as much as they
// are asked (huge: {"n": BYTES}) and tell their environment (env).
func newHostileServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "huge", Description: "Answers n bytes.", InputSchema: objectSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ N int }
			json.Unmarshal(req.Params.Arguments, &in)
			return textResult(strings.Repeat("x", in.N)), nil
		})
	srv.AddTool(&mcp.Tool{Name: "env", Description: "Its environment.", InputSchema: objectSchema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			env := os.Environ()
			slices.Sort(env)
			return textResult(strings.Join(env, "\n")), nil
		})
	return srv
}

// hostileCommand starts the test binary as newHostileServer.
func hostileCommand(t *testing.T) []string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{self, hostileServerArg}
}

// TestStdioLineBound: a local server's line of output (one message)
// larger than MaxMessageBytes is refused as it is read, with a
// *LimitError; the Source starts the server again and serves.
func TestStdioLineBound(t *testing.T) {
	const limit = 256 << 10
	src := open(t, mcpclient.Server{Name: "local", Command: hostileCommand(t), MaxMessageBytes: limit})
	huge := toolOf(t, src, "local__huge")
	if res, err := call(t, huge, `{"n":1000}`); err != nil || res.Output != strings.Repeat("x", 1000) {
		t.Fatalf("a small answer: %.40q %v", res.Output, err)
	}
	_, err := call(t, huge, fmt.Sprintf(`{"n":%d}`, 8<<20))
	var le *mcpclient.LimitError
	if !errors.Is(err, mcpclient.ErrTooLarge) || !errors.As(err, &le) || le.Max != limit || !strings.Contains(err.Error(), "line") {
		t.Fatalf("an answer of 8 MiB: %v, want a LimitError", err)
	}
	waitFor(t, "a call answered again", func() bool {
		res, err := call(t, huge, `{"n":10}`)
		return err == nil && res.Output == "xxxxxxxxxx"
	})
}

// TestStdioEnvironment: a local server gets the few variables every
// program needs (PATH, HOME, …) and those its configuration names, and no
// other of the host's: not a provider's key, not another server's token.
func TestStdioEnvironment(t *testing.T) {
	t.Setenv("MCPCLIENT_TEST_PROVIDER_KEY", "sk-never-shown-77")
	t.Setenv("MCPCLIENT_TEST_OTHER_TOKEN", "tok-never-shown-88")
	envOf := func(t *testing.T, env []string) string {
		t.Helper()
		src := open(t, mcpclient.Server{Name: "local", Command: hostileCommand(t), Env: env})
		res, err := call(t, toolOf(t, src, "local__env"), `{}`)
		if err != nil {
			t.Fatal(err)
		}
		return "\n" + res.Output + "\n"
	}
	for name, env := range map[string][]string{"none named": nil, "one named": {"GRANTED=yes"}} {
		t.Run(name, func(t *testing.T) {
			got := envOf(t, env)
			if strings.Contains(got, "never-shown") {
				t.Errorf("the server sees the host's secrets:%s", got)
			}
			if !strings.Contains(got, "\nPATH="+os.Getenv("PATH")+"\n") {
				t.Errorf("the server has no PATH:%s", got)
			}
			if env != nil && !strings.Contains(got, "\nGRANTED=yes\n") {
				t.Errorf("the variable named is not given:%s", got)
			}
		})
	}
}
