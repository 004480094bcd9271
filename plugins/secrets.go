package plugins

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Secrets at egress: a credential the host adds to a plugin's HTTP
// requests to one host, after the allow-list check, on every request of
// the call to that host (redirects included: a redirect elsewhere goes
// without it: it goes on a copy of each request, never on the request the
// client builds a redirect from). The plugin never reads it: it is in no
// error text, no log, and prints as its header and host only; a header
// of the same name the plugin sets on a request to that host is replaced.
// A response that echoes it back (an error quoting the request, a debug
// endpoint) reaches the plugin with each form of it — the header's value,
// a bearer token, basic credentials encoded or not, a password — replaced
// by "[secret withheld]", in its body and its headers; forms shorter than
// 6 bytes are not looked for.

// EgressSecret is one credential bound to a host.
type EgressSecret struct {
	// Host is the host it is sent to, as Limits.AllowedHosts names hosts;
	// it must be among them.
	Host string `json:"host"`
	// Header is the request header it goes in, e.g. "Authorization" or
	// "X-Api-Key".
	Header string `json:"header"`
	// Value is the header's value as sent ("Bearer TOKEN", "Basic …", a
	// key). It is never printed (String, logs, JSON).
	Value string `json:"-"`
}

// String names the secret without its value.
func (s EgressSecret) String() string { return fmt.Sprintf("%s for %s", s.Header, s.Host) }

// GoString is String: %#v prints no value either.
func (s EgressSecret) GoString() string { return s.String() }

// secretRule is a parsed EgressSecret.
type secretRule struct {
	rule   hostRule
	header string // canonical
	value  string
}

// checkSecrets validates secrets against the hosts they may go to.
func checkSecrets(secrets []EgressSecret, hosts []string) error {
	allowed := hostRules(hosts)
	for _, s := range secrets {
		r, err := parseHostRule(s.Host)
		if err != nil {
			return fmt.Errorf("secret %s: %v", s, err)
		}
		switch {
		case !coveredBy(allowed, r):
			return fmt.Errorf("secret %s: the host is not among the allowed hosts %q", s, hosts)
		case !httpguts.ValidHeaderFieldName(s.Header):
			return fmt.Errorf("secret %s: %q is not a header name", s, s.Header)
		case s.Value == "" || !httpguts.ValidHeaderFieldValue(s.Value):
			return fmt.Errorf("secret %s: its value is empty or not a header value", s)
		}
	}
	return nil
}

// secretTransport adds the secrets to the requests to their hosts.
type secretTransport struct {
	next    http.RoundTripper
	secrets []secretRule
}

func (t *secretTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host, port := hostPort(req.URL)
	// The secret goes on a copy: the request the client keeps, from which
	// it builds a redirect's, never holds it.
	var out *http.Request
	for _, s := range t.secrets {
		if s.rule.match(host, port) {
			if out == nil {
				out = req.Clone(req.Context())
			}
			out.Header.Set(s.header, s.value)
		}
	}
	if out == nil {
		return t.next.RoundTrip(req)
	}
	return t.next.RoundTrip(out)
}

// secretWithheld replaces a secret a response echoes.
const secretWithheld = "[secret withheld]"

// withholdSecrets returns what replaces the forms of secrets a response
// may echo: each value as sent, a bearer token, basic credentials encoded
// and decoded, and their password; nil when there are none.
func withholdSecrets(secrets []EgressSecret) *strings.Replacer {
	var forms []string
	add := func(f string) {
		if len(f) >= 6 && !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	for _, s := range secrets {
		add(s.Value)
		scheme, rest, _ := strings.Cut(s.Value, " ")
		switch strings.ToLower(scheme) {
		case "bearer":
			add(rest)
		case "basic":
			add(rest)
			if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
				add(string(b))
				if _, pw, ok := strings.Cut(string(b), ":"); ok {
					add(pw)
				}
			}
		}
	}
	if len(forms) == 0 {
		return nil
	}
	// The longest first: a token inside its header's value goes with it.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, f := range forms {
		pairs = append(pairs, f, secretWithheld)
	}
	return strings.NewReplacer(pairs...)
}

// withhold is s without the guard's secrets.
func (g *httpGuard) withhold(s string) string {
	if g.withheld == nil {
		return s
	}
	return g.withheld.Replace(s)
}
