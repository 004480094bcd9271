package plugins

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Secrets at egress: a credential the host adds to a plugin's HTTP
// requests to one host, after the allow-list check, on every request of
// the call to that host (redirects included: a redirect elsewhere goes
// without it: it goes on a copy of each request, never on the request the
// client builds a redirect from). A secret bound to a host without a port
// goes on https requests to port 443 only, never in clear text; one bound
// to host:port goes to that port, whatever the scheme. The plugin never
// reads it: it is in no error text, no log, and prints as its header and
// host only; a header of the same name the plugin sets on a request to
// that host is replaced.
//
// A request that carries a secret goes with "Accept-Encoding: identity"
// and without Range or If-Range, whatever the plugin asked: a host that
// reflects requests cannot hand the secret back compressed or in pieces.
// An answer compressed anyway (gzip, deflate) is decoded before the
// plugin reads it; one in an encoding the host does not read (br, zstd…)
// is refused (ErrDenied).
//
// A host that echoes the secret back anyway (an error quoting the request,
// a debug endpoint) does not hand it to the plugin: every answer of a
// call of a module with secrets — its headers' names and values, its body
// — reaches the plugin, and its traffic record, with the secret's forms
// replaced by "[secret withheld]" (see [withholder] for which forms). The
// same goes for what the call hands back: its output, its error, its log
// lines and its traffic record (URLs, header names, key-value keys and
// values, errors), so that a plugin that joins pieces of a secret it got
// one by one shows no more of it than it read.

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

// sends reports whether the secret goes on a request of scheme to host
// and port: its host's, and in clear text only to a port it names.
func (s secretRule) sends(scheme, host, port string) bool {
	return s.rule.match(scheme, host, port) && (scheme == "https" || s.rule.port != "")
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

// secretTransport adds the secrets to the requests to their hosts, asks
// for their answers whole and unencoded, and decodes an answer encoded
// anyway.
type secretTransport struct {
	next    http.RoundTripper
	secrets []secretRule
}

// maxContentCodings bounds the encodings of one answer the host decodes
// ("gzip, gzip" is two).
const maxContentCodings = 2

func (t *secretTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	scheme, host, port := endpointOf(req.URL)
	// The secret goes on a copy: the request the client keeps, from which
	// it builds a redirect's, never holds it.
	var out *http.Request
	for _, s := range t.secrets {
		if s.sends(scheme, host, port) {
			if out == nil {
				out = req.Clone(req.Context())
			}
			out.Header.Set(s.header, s.value)
		}
	}
	if out == nil {
		return t.next.RoundTrip(req)
	}
	// A host that reflects the request hands back what it is asked for:
	// the whole answer, as is.
	out.Header.Set("Accept-Encoding", "identity")
	out.Header.Del("Range")
	out.Header.Del("If-Range")
	res, err := t.next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if err := decodeContent(res); err != nil {
		res.Body.Close()
		return nil, err
	}
	return res, nil
}

// decodeContent makes res's body its content: an answer encoded despite
// "Accept-Encoding: identity" is decoded (gzip, deflate; the caller bounds
// what it reads of the decoded body), and its Content-Encoding and
// Content-Length dropped; one in an encoding the host does not read is
// refused.
func decodeContent(res *http.Response) error {
	var codings []string
	for _, v := range res.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return nil
	}
	if len(codings) > maxContentCodings {
		return denied("the answer to a request that carries a secret is encoded %d times (%s): the host decodes at most %d to withhold the secret", len(codings), strings.Join(codings, ", "), maxContentCodings)
	}
	// An empty body (a HEAD's answer, a 204) has nothing to decode.
	head := bufio.NewReader(res.Body)
	if _, err := head.Peek(1); err == io.EOF {
		res.Header.Del("Content-Encoding")
		return nil
	}
	var body io.Reader = head
	// The last coding applied is the first undone.
	for i := len(codings) - 1; i >= 0; i-- {
		switch codings[i] {
		case "gzip", "x-gzip":
			body = &lazyReader{open: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }, src: body}
		case "deflate":
			body = &lazyReader{open: openDeflate, src: body}
		default:
			return denied("the answer to a request that carries a secret is encoded %q, which the host does not decode to withhold the secret (it asked for identity; it reads gzip and deflate)", codings[i])
		}
	}
	res.Body = struct {
		io.Reader
		io.Closer
	}{body, res.Body}
	res.Header.Del("Content-Encoding")
	res.Header.Del("Content-Length")
	res.ContentLength = -1
	res.Uncompressed = true
	return nil
}

// openDeflate reads HTTP's deflate: zlib, or raw deflate as some servers
// send it.
func openDeflate(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(2)
	if err == nil && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 && head[0]&0x0f == 8 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}

// lazyReader decodes src as it is read, opening the decoder at the first
// read (a decoder reads its header when it is made).
type lazyReader struct {
	src  io.Reader
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
	err  error
}

func (l *lazyReader) Read(p []byte) (int, error) {
	if l.r == nil && l.err == nil {
		l.r, l.err = l.open(l.src)
	}
	if l.err != nil {
		return 0, fmt.Errorf("decoding the answer: %w", l.err)
	}
	n, err := l.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("decoding the answer: %w", err)
	}
	return n, err
}

// secretWithheld replaces a secret a text holds.
const secretWithheld = "[secret withheld]"

// withhold is s without the guard's secrets.
func (g *httpGuard) withhold(s string) string {
	if g == nil || g.withheld == nil {
		return s
	}
	out, _ := g.withheld.withhold(s)
	return out
}

// withholdError is err with its text withheld of the guard's secrets: err
// itself when its text holds none.
func (g *httpGuard) withholdError(err error) error {
	if err == nil || g == nil || g.withheld == nil {
		return err
	}
	msg, found := g.withheld.withhold(err.Error())
	if !found {
		return err
	}
	if pe, ok := err.(*PluginError); ok && pe.Err != nil {
		inner, _ := g.withheld.withhold(pe.Err.Error())
		cp := *pe
		cp.Err = &withheldError{msg: inner, err: pe.Err}
		return &cp
	}
	if isDenied(err) {
		return &deniedError{msg: msg}
	}
	return &withheldError{msg: msg, err: err}
}

// withheldError is an error whose text held a secret: its text is the
// withheld one. It answers errors.Is and errors.As as the error it stands
// for, but does not unwrap to it (whose text holds the secret).
type withheldError struct {
	msg string
	err error
}

func (e *withheldError) Error() string        { return e.msg }
func (e *withheldError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *withheldError) As(target any) bool   { return errors.As(e.err, target) }

// withholdOutput is what a call of m answered, withheld of its secrets.
func (m *Module) withholdOutput(out []byte) []byte {
	if m.guard == nil || m.guard.withheld == nil {
		return out
	}
	s, found := m.guard.withheld.withhold(string(out))
	if !found {
		return out
	}
	return []byte(s)
}

// withholdError is err, of a call of m, withheld of its secrets.
func (m *Module) withholdError(err error) error { return m.guard.withholdError(err) }
