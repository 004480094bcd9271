package plugins_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
)

// httpAnswer is the host's answer to an http_request, as the reflect
// plugin's http tool hands it back.
type httpAnswer struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
	Error  string `json:"error"`
	Denied bool   `json:"denied"`
}

func readAnswer(t *testing.T, out string) httpAnswer {
	t.Helper()
	var a httpAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("the answer %q: %v", out, err)
	}
	return a
}

// TestOtherPortNamesAllowedPort: a request to another port of a host
// allowed without one is refused with a message that says which port the
// host is allowed on — its scheme's default port, 443 for https, 80 for
// http, a wildcard's subdomains alike — and the server on that other port
// is not reached. A host allowed only with a port, or not at all, is
// refused without such a hint.
func TestOtherPortNamesAllowedPort(t *testing.T) {
	l := plugins.Limits{AllowedHosts: []string{"api.example.com", "dev.example.com:8080", "*.example.org"}}
	for u, want := range map[string]string{
		"https://api.example.com:8443/":   "api.example.com is allowed on https's default port 443 only",
		"http://api.example.com:443/":     "api.example.com is allowed on http's default port 80 only",
		"https://a.example.org:6379/":     "a.example.org is allowed on https's default port 443 only",
		"https://dev.example.com/":        "",
		"https://other.example.net:8443/": "",
	} {
		err := l.Allows(u)
		switch {
		case err == nil:
			t.Errorf("%s: allowed, want it refused", u)
		case want == "" && strings.Contains(err.Error(), "allowed on"):
			t.Errorf("%s: %v, want no port named (the host is not allowed without a port)", u, err)
		case want != "" && !strings.Contains(err.Error(), want):
			t.Errorf("%s: %v, want %q", u, err, want)
		}
	}

	// Through a plugin's request: 127.0.0.1 allowed without a port, a
	// server on another port of it.
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		fmt.Fprint(w, "reached")
	}))
	t.Cleanup(srv.Close)
	rt, _ := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true})
	res, err := callTool(t, m, "http", request(srv.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	a := readAnswer(t, res.Output)
	if !a.Denied || !strings.Contains(a.Error, "127.0.0.1 is allowed on http's default port 80 only") {
		t.Errorf("a request to %s, 127.0.0.1 allowed without a port: %s; want it denied naming port 80", srv.URL, res.Output)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the server on another port was asked %d times, want none", n)
	}
}

// TestSecretReplacesPluginHeader: when a secret is bound to a header for a
// host, a header of the same name (in any case) that the plugin set on
// its request to that host is replaced by the secret: the server receives
// the secret's value, once, and never the plugin's.
func TestSecretReplacesPluginHeader(t *testing.T) {
	const secret, own = "key-9Fq2-bound-by-the-host", "key-set-by-the-plugin"
	var mu sync.Mutex
	var got [][]string // the X-Api-Key values of each request the server was sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("X-Api-Key"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
		Secrets: []plugins.EgressSecret{{Host: u.Host, Header: "X-Api-Key", Value: secret}}})
	res, err := callTool(t, m, "http", request(srv.URL+"/", map[string]string{"x-API-key": own}))
	if err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, res.Output); a.Status != http.StatusOK {
		t.Fatalf("the request: %s", res.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !slices.Equal(got[0], []string{secret}) {
		t.Errorf("the server was sent X-Api-Key %q, want the secret alone, once, on one request (not the plugin's %q)", got, own)
	}
}

// TestHTTPTimeoutCutsRequest: Limits.HTTPTimeout bounds one request,
// redirects included. A request whose server never answers, directly or
// at the end of a redirect, is cut at the timeout and the plugin gets an
// error naming it, well within the call's own deadline: the plugin's next
// request of the same call is answered. A chain of redirects each quicker
// than the timeout but longer together is cut too: the timeout is the
// chain's, not each hop's. The stalling handler waits until the test
// ends, so only the timeout can end the request.
func TestHTTPTimeoutCutsRequest(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/stall":
			<-release
		case p == "/to-stall":
			http.Redirect(w, r, "/stall", http.StatusFound)
		case strings.HasPrefix(p, "/hop/"): // a redirect after a pause shorter than the timeout
			n, _ := strconv.Atoi(strings.TrimPrefix(p, "/hop/"))
			select {
			case <-time.After(200 * time.Millisecond):
			case <-release:
			}
			if n > 0 {
				http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
				return
			}
			fmt.Fprint(w, "arrived")
		case p == "/after":
			fmt.Fprint(w, "after")
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Start()
	// Cleanups run last in first: release the handlers before closing.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
		HTTPTimeout: 300 * time.Millisecond, MaxRedirects: 5, CallTimeout: 20 * time.Second})
	for _, path := range []string{"/stall", "/to-stall", "/hop/4"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			res, err := callTool(t, m, "cat", `{"requests":[`+request(srv.URL+path, nil)+","+request(srv.URL+"/after", nil)+`]}`)
			if err != nil {
				t.Fatalf("the call failed, want the request cut by the HTTP timeout and the call going on: %v", err)
			}
			// The first answer's error, then the second's body.
			first, ok := strings.CutSuffix(res.Output, "after")
			if !ok {
				t.Errorf("the request after it was not answered: %q", res.Output)
			}
			if !strings.Contains(first, "request failed") || !strings.Contains(first, "deadline exceeded") && !strings.Contains(first, "timeout") {
				t.Errorf("the request to %s: %q, want it failed naming a timeout", path, first)
			}
		})
	}
}

// TestMaxHTTPRequestsCountsRedirects: Limits.MaxHTTPRequests counts the
// redirects a request follows: a chain of redirects longer than the bound,
// though within MaxRedirects, is refused at the request past the bound,
// naming it, and that request is never sent.
func TestMaxHTTPRequestsCountsRedirects(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
			return
		}
		fmt.Fprint(w, "arrived")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
		MaxHTTPRequests: 3, MaxRedirects: 10})
	res, err := callTool(t, m, "http", request(srv.URL+"/hop/5", nil))
	if err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, res.Output); !a.Denied || !strings.Contains(a.Error, "more than 3 HTTP requests in one call") {
		t.Errorf("a chain of 5 redirects under MaxHTTPRequests 3: %s; want it refused naming the bound", res.Output)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("the server was asked %d times, want 3 (the request and two redirects)", n)
	}
}
