package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

// fakeServer is an OpenAI-compatible endpoint that answers every request
// with a fixed status, headers and body, and records what it received.
type fakeServer struct {
	*httptest.Server

	mu       sync.Mutex
	requests int
	bodies   [][]byte
	headers  []http.Header
}

// reply is what a fakeServer answers.
type reply struct {
	status int // 0 means 200
	header http.Header
	body   []byte
}

// serve starts a fakeServer answering with r.
func serve(t testing.TB, r reply) *fakeServer {
	t.Helper()
	return serveFunc(t, func(w http.ResponseWriter, _ *http.Request) {
		for k, vs := range r.header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if w.Header().Get("Content-Type") == "" {
			if r.status == 0 || r.status == http.StatusOK {
				w.Header().Set("Content-Type", "text/event-stream")
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
		}
		if r.status != 0 {
			w.WriteHeader(r.status)
		}
		_, _ = w.Write(r.body)
	})
}

// serveFunc starts a fakeServer whose answers h writes.
func serveFunc(t testing.TB, h http.HandlerFunc) *fakeServer {
	t.Helper()
	fs := &fakeServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fs.mu.Lock()
		fs.requests++
		fs.bodies = append(fs.bodies, body)
		fs.headers = append(fs.headers, r.Header.Clone())
		fs.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(fs.Close)
	return fs
}

// count returns the number of requests received.
func (fs *fakeServer) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.requests
}

// lastBody returns the last request body decoded as JSON.
func (fs *fakeServer) lastBody(t testing.TB) map[string]any {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.bodies) == 0 {
		t.Fatal("no request received")
	}
	var m map[string]any
	if err := json.Unmarshal(fs.bodies[len(fs.bodies)-1], &m); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, fs.bodies[len(fs.bodies)-1])
	}
	return m
}

// lastHeader returns the last request's header.
func (fs *fakeServer) lastHeader() http.Header {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.headers[len(fs.headers)-1]
}

// newClient returns a client of fs with no key and cfg's other fields.
func newClient(t testing.TB, fs *fakeServer, cfg Config) *Client {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = fs.URL + "/api/v1"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = "test-key"
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// userRequest is a minimal request.
func userRequest(text string) model.Request {
	return model.Request{Model: "openai/gpt-4o-mini",
		Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart(text)}}}}
}

// recorder collects deltas.
type recorder struct {
	mu     sync.Mutex
	deltas []model.Delta
}

func (r *recorder) on(d model.Delta) {
	r.mu.Lock()
	r.deltas = append(r.deltas, d)
	r.mu.Unlock()
}

// text joins the deltas of kind k.
func (r *recorder) text(k model.DeltaKind) string {
	var b strings.Builder
	for _, d := range r.deltas {
		if d.Kind == k {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// args joins the argument fragments of tool call i.
func (r *recorder) args(i int) string {
	var b strings.Builder
	for _, d := range r.deltas {
		if d.Kind == model.DeltaToolCall && d.ToolIndex == i {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// fixtureHeaders parses a .headers fixture (a status line, then header
// lines).
func fixtureHeaders(t testing.TB, name string) http.Header {
	t.Helper()
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(fixtures.Bytes(name)))
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first || line == "" {
			first = false
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("%s: bad header line %q", name, line)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

// events splits an SSE fixture into its events (without the blank line
// that ends each).
func events(b []byte) []string {
	var out []string
	for _, e := range strings.Split(string(b), "\n\n") {
		if strings.TrimSpace(e) != "" {
			out = append(out, e)
		}
	}
	return out
}

// sse joins events into a stream body.
func sse(evs ...string) []byte {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return []byte(b.String())
}

// data renders a JSON chunk as an SSE data event.
func data(chunk string) string { return "data: " + chunk }

// redirectTransport sends every request to target, keeping the original
// URL for inspection: a way to test what goes to api.openai.com.
type redirectTransport struct {
	target *url.URL

	mu   sync.Mutex
	urls []string
}

func (rt *redirectTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.urls = append(rt.urls, r.URL.String())
	rt.mu.Unlock()
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host = rt.target.Scheme, rt.target.Host, ""
	return http.DefaultTransport.RoundTrip(r2)
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t testing.TB, got any, want string) bool {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var gv, wv any
	if err := json.Unmarshal(g, &gv); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &wv); err != nil {
		t.Fatalf("bad want JSON: %v", err)
	}
	gj, _ := json.Marshal(gv)
	wj, _ := json.Marshal(wv)
	return bytes.Equal(gj, wj)
}
