package mcpclient

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Bearer returns a client like c (nil: http.DefaultClient) that sends
// "Authorization: Bearer token" on its requests to rawURL's host and port,
// and there only: a redirect elsewhere goes without it. The token is in
// no error and no log of this package.
func Bearer(c *http.Client, rawURL, token string) *http.Client {
	return Header(c, rawURL, "Authorization", "Bearer "+token)
}

// Header returns a client like c (nil: http.DefaultClient) that sets the
// header name to value on its requests to rawURL's host and port, and
// there only (an API key in a header of its own, basic credentials).
func Header(c *http.Client, rawURL, name, value string) *http.Client {
	return withHost(c, rawURL, func(req *http.Request) (*http.Request, error) {
		req.Header.Set(name, value)
		return req, nil
	})
}

// ClientCredentials returns a client like c (nil: http.DefaultClient) that
// sends an OAuth 2.0 access token, got with the client-credentials grant
// of cfg (through c as well, so that its egress rules apply to the token
// endpoint) and renewed before it expires, on its requests to rawURL's
// host and port, and there only.
func ClientCredentials(c *http.Client, rawURL string, cfg clientcredentials.Config) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	ts := cfg.TokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, c))
	return withHost(c, rawURL, func(req *http.Request) (*http.Request, error) {
		tok, err := ts.Token()
		if err != nil {
			return nil, err
		}
		tok.SetAuthHeader(req)
		return req, nil
	})
}

// withHost returns a client like c whose requests to rawURL's host and
// port go through add (on a copy of the request).
func withHost(c *http.Client, rawURL string, add func(*http.Request) (*http.Request, error)) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	u, _ := url.Parse(rawURL)
	out := *c
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = &hostTransport{next: next, host: hostPort(u), add: add}
	return &out
}

// hostTransport adds credentials to the requests to one host.
type hostTransport struct {
	next http.RoundTripper
	host string
	add  func(*http.Request) (*http.Request, error)
}

func (t *hostTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if hostPort(req.URL) != t.host {
		return t.next.RoundTrip(req)
	}
	out, err := t.add(req.Clone(req.Context()))
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.next.RoundTrip(out)
}

// hostPort is u's lower-case host and port (the scheme's when it names
// none).
func hostPort(u *url.URL) string {
	if u == nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}
