package plugins

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
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

// maxPullRedirects bounds the redirects of one request of a
// [PullClient]: a registry sends a blob's request to its storage once.
const maxPullRedirects = 5

// PullClient returns the HTTP client host code fetches plugin modules
// with from the registry at registry (host[:port], as an OCI reference
// names it), under the sandbox's egress rules where they apply: a
// redirect — a registry serves its blobs from a CDN or a bucket — may go
// to any host, but only at a public address (checked on the address
// dialled, after DNS, as for plugins); the registry itself may be at any
// address, the operator having named it (a registry on the loopback or
// a private network). Only http and https, no credentials in a URL, at
// most 5 redirects, no proxy from the environment, and bounded waits for
// a connection (10s), a TLS handshake (10s) and an answer's headers
// (30s). A refusal wraps ErrDenied. The caller's context bounds the whole
// of a pull: give it a deadline.
func PullClient(registry string) *http.Client {
	trusted := map[string]bool{}
	reg := strings.ToLower(registry)
	if _, _, err := net.SplitHostPort(reg); err == nil {
		trusted[reg] = true
	} else {
		trusted[net.JoinHostPort(reg, "443")], trusted[net.JoinHostPort(reg, "80")] = true, true
	}
	open := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	public := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: func(network, address string, c syscall.RawConn) error {
		if err := (&httpGuard{}).control(network, address, c); err != nil {
			return denied("%s is not a public address: only the registry %s may be elsewhere (a redirect to another host must be public)", address, registry)
		}
		return nil
	}}
	return &http.Client{
		Transport: &http.Transport{
			Proxy: nil, // never a proxy from the environment: it would bypass the address check
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if trusted[strings.ToLower(addr)] {
					return open.DialContext(ctx, network, addr)
				}
				return public.DialContext(ctx, network, addr)
			},
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           8,
			IdleConnTimeout:        30 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			ResponseHeaderTimeout:  30 * time.Second,
			ExpectContinueTimeout:  time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			switch {
			case len(via) > maxPullRedirects:
				return denied("more than %d redirects", maxPullRedirects)
			case req.URL.Scheme != "http" && req.URL.Scheme != "https":
				return denied("redirect to scheme %q (http and https only)", req.URL.Scheme)
			case req.URL.User != nil:
				return denied("redirect to a URL with credentials")
			}
			return nil
		},
	}
}
