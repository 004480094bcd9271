package plugins

import (
	"net/http"
	"testing"
)

// TestNoProxyFromEnvironment: neither a plugin's HTTP client nor the
// registry client of a pull takes a proxy from the environment
// (HTTP_PROXY and the like), which would carry requests past the address
// checks. (Go reads those variables once a process: a test setting them
// proves nothing, so the transports are checked.)
func TestNoProxyFromEnvironment(t *testing.T) {
	l, err := Limits{AllowedHosts: []string{"api.example.com"}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	g := newHTTPGuard(l)
	var tr *http.Transport
	switch next := g.client.Transport.(type) {
	case *http.Transport:
		tr = next
	default:
		t.Fatalf("the plugin's transport is a %T", next)
	}
	if tr.Proxy != nil {
		t.Error("the plugin's HTTP client takes a proxy")
	}
	pull, ok := PullClient("registry.example.com").Transport.(*http.Transport)
	if !ok || pull.Proxy != nil {
		t.Errorf("the pull client's transport %T takes a proxy", PullClient("registry.example.com").Transport)
	}
}
