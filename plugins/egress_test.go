package plugins_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/agentichost/agentic/plugins"
)

// TestEgressClient: the client host code gets for a tenant reaches the
// allowed hosts only, a redirect elsewhere included, private addresses
// only when allowed, and nothing without allowed hosts.
func TestEgressClient(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("other")) }))
	defer other.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, other.URL, http.StatusFound)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer ok.Close()
	host := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Host }
	get := func(c *http.Client, u string) error {
		res, err := c.Get(u)
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	c, err := plugins.EgressClient(plugins.Limits{AllowedHosts: []string{host(ok)}, AllowPrivateNetwork: true, MaxRedirects: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := get(c, ok.URL); err != nil {
		t.Errorf("the allowed host: %v", err)
	}
	for _, u := range []string{other.URL, ok.URL + "/away"} {
		if err := get(c, u); !errors.Is(err, plugins.ErrDenied) {
			t.Errorf("%s: %v, want ErrDenied", u, err)
		}
	}
	private, _ := plugins.EgressClient(plugins.Limits{AllowedHosts: []string{host(ok)}})
	if err := get(private, ok.URL); !errors.Is(err, plugins.ErrDenied) {
		t.Errorf("a loopback address without allow_private_network: %v", err)
	}
	none, _ := plugins.EgressClient(plugins.Limits{})
	if err := get(none, ok.URL); !errors.Is(err, plugins.ErrDenied) {
		t.Errorf("no allowed hosts: %v", err)
	}
	if _, err := plugins.EgressClient(plugins.Limits{AllowedHosts: []string{"http://x"}}); err == nil {
		t.Error("a bad host rule was taken")
	}
}

// TestLimitsAllows: the sandbox's rules for a URL, without a request.
func TestLimitsAllows(t *testing.T) {
	l := plugins.Limits{AllowedHosts: []string{"mcp.example.com", "*.example.org", "127.0.0.1:8080"}}
	for u, want := range map[string]bool{
		"https://mcp.example.com/mcp": true, "https://a.example.org/x": true, "http://127.0.0.1:8080/mcp": true,
		"https://evil.example.com/": false, "http://127.0.0.1:8081/": false, "ftp://mcp.example.com/": false,
		"https://user:pw@mcp.example.com/": false, "::not a url": false,
	} {
		if err := l.Allows(u); (err == nil) != want || err != nil && !errors.Is(err, plugins.ErrDenied) {
			t.Errorf("%s: %v, want allowed %v", u, err, want)
		}
	}
}
