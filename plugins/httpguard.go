package plugins

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// httpGuard is the http_request host function's client: it reaches only
// the tenant's allowed hosts, checks every redirect again, refuses
// non-public addresses (checked on the address actually dialled, after DNS,
// which defeats DNS rebinding) unless allowed, never uses a proxy from the
// environment, and caps sizes and time.
type httpGuard struct {
	withheld     *withholder // finds the secrets' forms in what a call reads or leaves (withhold.go); nil: no secrets
	rules        []hostRule
	allowPrivate bool
	maxBody      int64
	timeout      time.Duration
	maxRedirects int
	maxRequests  int
	client       *http.Client
}

// deniedError is a refusal by the sandbox.
type deniedError struct{ msg string }

func (e *deniedError) Error() string        { return e.msg }
func (e *deniedError) Is(target error) bool { return target == ErrDenied }

func denied(format string, args ...any) error {
	return &deniedError{msg: fmt.Sprintf(format, args...)}
}

func newHTTPGuard(l Limits) *httpGuard {
	g := &httpGuard{
		allowPrivate: l.AllowPrivateNetwork,
		maxBody:      l.MaxHTTPResponseBytes,
		timeout:      l.HTTPTimeout,
		maxRedirects: l.MaxRedirects,
		maxRequests:  l.MaxHTTPRequests,
	}
	g.rules = hostRules(l.AllowedHosts)
	if len(g.rules) == 0 {
		return g
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	g.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // never a proxy from the environment: it would bypass the address check
			DialContext:            dialer.DialContext,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           16,
			MaxIdleConnsPerHost:    4,
			IdleConnTimeout:        30 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			ExpectContinueTimeout:  time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: g.checkRedirect,
	}
	if len(l.Secrets) > 0 {
		st := &secretTransport{next: g.client.Transport}
		for _, s := range l.Secrets {
			if r, err := parseHostRule(s.Host); err == nil {
				st.secrets = append(st.secrets, secretRule{rule: r, header: http.CanonicalHeaderKey(s.Header), value: s.Value})
			}
		}
		g.client.Transport = st
		g.withheld = newWithholder(l.Secrets)
	}
	return g
}

// close releases idle connections.
func (g *httpGuard) close() {
	if g.client != nil {
		g.client.CloseIdleConnections()
	}
}

// control runs for every connection, with the resolved address about to
// be dialled.
func (g *httpGuard) control(_, address string, _ syscall.RawConn) error {
	if g.allowPrivate {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return denied("bad address %q", address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return denied("bad address %q", address)
	}
	if !publicAddr(ip) {
		return denied("address %s is not public (loopback, private, link-local or reserved) and the tenant does not allow private networks", ip)
	}
	return nil
}

// nonPublic lists special-purpose ranges netip's predicates do not cover.
var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16", "fec0::/10",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// publicAddr reports whether ip is a public unicast address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// endpointOf returns a URL's scheme (lower case), the host it names,
// lower case and without a final dot, and its port (the scheme's default
// when it names none), as hostRule.match takes them.
func endpointOf(u *url.URL) (scheme, host, port string) {
	scheme = strings.ToLower(u.Scheme)
	host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port = u.Port()
	if port == "" {
		port = defaultPorts[scheme]
	}
	return scheme, host, port
}

// checkURL reports whether u may be requested.
func (g *httpGuard) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return denied("scheme %q is not allowed (http and https only)", u.Scheme)
	}
	if u.User != nil {
		return denied("credentials in the URL are not allowed")
	}
	scheme, host, port := endpointOf(u)
	if host == "" {
		return denied("URL has no host")
	}
	for _, r := range g.rules {
		if r.match(scheme, host, port) {
			return nil
		}
	}
	for _, r := range g.rules {
		if r.port == "" && r.match(scheme, host, defaultPorts[scheme]) {
			return denied("host %s is not among the hosts this plugin may reach (%s is allowed on %s's default port %s only: name another port as host:port)",
				net.JoinHostPort(host, port), host, scheme, defaultPorts[scheme])
		}
	}
	return denied("host %s is not among the hosts this plugin may reach", net.JoinHostPort(host, port))
}

func (g *httpGuard) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > g.maxRedirects {
		return http.ErrUseLastResponse
	}
	if env, ok := req.Context().Value(envKey{}).(*callEnv); ok {
		if env.httpRequests++; env.httpRequests > g.maxRequests {
			return denied("more than %d HTTP requests in one call", g.maxRequests)
		}
	}
	if err := g.checkURL(req.URL); err != nil {
		return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
	}
	return nil
}

type httpWireRequest struct {
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	BodyBase64 []byte            `json:"body_base64"`
}

type httpWireResponse struct {
	Status     int               `json:"status,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Error      string            `json:"error,omitempty"`
	Denied     bool              `json:"denied,omitempty"`
}

func wireError(err error) []byte {
	res := httpWireResponse{Error: err.Error(), Denied: errors.Is(err, ErrDenied)}
	b, _ := json.Marshal(res)
	return b
}

// do runs one http_request for a call and returns the JSON answer; a
// call that keeps its traffic records the exchange.
func (g *httpGuard) do(ctx context.Context, env *callEnv, raw []byte) []byte {
	var started time.Time
	if env.record {
		started = time.Now()
	}
	req, res, data, err := g.exchange(ctx, env, raw)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(res); err == nil {
			if env.record {
				env.noteHTTP(req, &res, data, nil, time.Since(started))
			}
			return b
		}
	}
	// An error may quote what the host answered (a malformed answer, a
	// redirect's Location).
	err = g.withholdError(err)
	if env.record {
		env.noteHTTP(req, nil, nil, err, time.Since(started))
	}
	return wireError(err)
}

// exchange runs one http_request: what was asked (as the record keeps
// it), and the answer (data is its body), or why there is none.
func (g *httpGuard) exchange(ctx context.Context, env *callEnv, raw []byte) (req httpRequestOf, res httpWireResponse, data []byte, err error) {
	var w httpWireRequest
	if err := json.Unmarshal(raw, &w); err != nil {
		if g.client == nil {
			return httpRequestOf{method: "?"}, res, nil, denied("HTTP is not allowed for this plugin")
		}
		return httpRequestOf{method: "?"}, res, nil, fmt.Errorf("malformed request: %v", err)
	}
	if env.record {
		req = requestOf(&w)
	}
	if g.client == nil {
		return req, res, nil, denied("HTTP is not allowed for this plugin")
	}
	if env.httpRequests++; env.httpRequests > g.maxRequests {
		return req, res, nil, denied("more than %d HTTP requests in one call", g.maxRequests)
	}
	u, err := url.Parse(w.URL)
	if err != nil {
		return req, res, nil, fmt.Errorf("bad url: %v", err)
	}
	if err := g.checkURL(u); err != nil {
		return req, res, nil, err
	}
	method := strings.ToUpper(w.Method)
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	switch {
	case w.Body != nil:
		body = strings.NewReader(*w.Body)
	case w.BodyBase64 != nil:
		body = strings.NewReader(string(w.BodyBase64))
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return req, res, nil, fmt.Errorf("bad request: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(w.Headers)) { // in order: of two spellings of a name, the same one wins every time
		v := w.Headers[k]
		switch http.CanonicalHeaderKey(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Upgrade", "Proxy-Authorization", "Proxy-Connection":
			continue
		}
		hreq.Header.Set(k, v)
	}
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", "agentic-host-plugin")
	}
	if env.idemKey != "" && hreq.Header.Get("Idempotency-Key") == "" {
		// The same on every attempt of the call (journal.go): a server
		// that honours it runs a request sent again after a crash once.
		hreq.Header.Set("Idempotency-Key", env.idemKey)
	}
	hres, err := g.client.Do(hreq)
	if err != nil {
		var de *deniedError
		if errors.As(err, &de) {
			return req, res, nil, de
		}
		return req, res, nil, fmt.Errorf("request failed: %v", scrubURLError(err))
	}
	defer hres.Body.Close()
	data, err = io.ReadAll(io.LimitReader(hres.Body, g.maxBody+1))
	if err != nil {
		return req, res, nil, fmt.Errorf("reading the response: %v", err)
	}
	if int64(len(data)) > g.maxBody {
		return req, res, nil, denied("response body exceeds %d bytes", g.maxBody)
	}
	res = httpWireResponse{Status: hres.StatusCode, Headers: map[string]string{}}
	// A host that echoes the credential back (in an error, a debug
	// endpoint, a header's name) does not hand it to the plugin, nor to
	// its record.
	for k, v := range hres.Header {
		k, v := g.withhold(strings.ToLower(k)), g.withhold(strings.Join(v, ", "))
		if prev, ok := res.Headers[k]; ok {
			v = prev + ", " + v // two names withheld alike
		}
		res.Headers[k] = v
	}
	if g.withheld != nil {
		if body := g.withhold(string(data)); body != string(data) {
			data = []byte(body)
			delete(res.Headers, "content-length") // the length of what it was
		}
	}
	if utf8.Valid(data) {
		s := string(data)
		res.Body = &s
	} else {
		res.BodyBase64 = base64.StdEncoding.EncodeToString(data)
	}
	return req, res, data, nil
}

// scrubURLError drops the URL from a *url.Error (it may carry query
// secrets); the plugin knows what it asked for.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
