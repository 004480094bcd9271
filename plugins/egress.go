package plugins

import (
	"fmt"
	"net/http"
	"net/url"
)

// EgressClient returns an HTTP client that reaches only what l allows, as
// a plugin's http_request does: the hosts of l.AllowedHosts, every request
// and every redirect checked; public addresses only unless
// l.AllowPrivateNetwork, checked on the address dialled (after DNS); no
// proxy from the environment; at most l.MaxRedirects redirects; l.Secrets
// added to the requests to their hosts. It is for host code that reaches
// the network for a tenant — an MCP server's tools — within the tenant's
// sandbox. A refusal wraps ErrDenied. It sets no timeout and no size
// bound: the caller's requests have their own.
func EgressClient(l Limits) (*http.Client, error) {
	l, err := l.normalize()
	if err != nil {
		return nil, err
	}
	g := newHTTPGuard(l)
	if g.client == nil {
		return &http.Client{Transport: denyAll{}}, nil
	}
	c := *g.client
	c.Transport = &checkedTransport{g: g, next: c.Transport}
	return &c, nil
}

// checkedTransport checks each request's URL against the guard's rules
// (the client checks redirects too, before they are sent).
type checkedTransport struct {
	g    *httpGuard
	next http.RoundTripper
}

func (t *checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.g.checkURL(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.next.RoundTrip(req)
}

// denyAll refuses every request: no host is allowed.
type denyAll struct{}

func (denyAll) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, denied("no host is allowed")
}

// Allows reports whether the sandbox l lets host code (or a plugin)
// request rawURL: an http or https URL without credentials whose host and
// port are among l.AllowedHosts. The address it resolves to is checked
// when a request dials it, not here. A refusal wraps ErrDenied.
func (l Limits) Allows(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDenied, err)
	}
	return (&httpGuard{rules: hostRules(l.AllowedHosts)}).checkURL(u)
}
