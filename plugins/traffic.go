package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/ledger"
)

// What a tool's call did through the host functions: each call of a tool
// keeps a bounded record of its HTTP requests and key-value accesses
// (ledger.ToolTraffic), which the host writes into the ledger beside the
// call's result, and which ReplayCall answers a call from. Nothing is
// allocated for a call that does nothing through them but the empty
// record itself.

// The bounds of a call's traffic record.
const (
	// MaxTrafficEntries bounds the HTTP requests and key-value accesses a
	// call's record keeps, together; the others are counted
	// (ToolTraffic.Dropped) and the record marked Truncated.
	MaxTrafficEntries = 64
	// MaxTrafficBytes bounds the texts a call's record keeps, together:
	// URLs, header names, keys and errors, then response bodies and
	// headers and values read. A body or value that does not fit in what
	// is left is not kept (BodyOmitted, ValueOmitted): its size and digest
	// are; an access whose URL, header names or key do not fit is dropped
	// (Truncated).
	MaxTrafficBytes = 64 << 10
	// maxTrafficURLBytes bounds a URL in the record: a longer one is cut,
	// with the digest of the whole of it.
	maxTrafficURLBytes = 2048
	// maxTrafficErrorBytes bounds an error text in the record.
	maxTrafficErrorBytes = 512
)

// notRecorded stands for a response header's value the record leaves out
// (a set-cookie's).
const notRecorded = "(not recorded)"

// trafficLog is a call's record in the making.
type trafficLog struct {
	rec  ledger.ToolTraffic
	seq  int // the next access's place
	kept int // bytes of bodies, headers and values kept
}

// trafficLog returns the call's record, made at its first access.
func (env *callEnv) trafficLog() *trafficLog {
	if env.traffic == nil {
		env.traffic = &trafficLog{}
	}
	return env.traffic
}

// next returns the place of the next access, and whether the record has
// room for it (if not, it is counted as dropped).
func (l *trafficLog) next() (seq int, ok bool) {
	seq = l.seq
	l.seq++
	if len(l.rec.HTTP)+len(l.rec.KV) >= MaxTrafficEntries {
		l.drop()
		return seq, false
	}
	return seq, true
}

// drop counts an access the record has no room for.
func (l *trafficLog) drop() {
	l.rec.Truncated = true
	l.rec.Dropped++
}

// exchangeBytes is what an exchange's texts take in the record before its
// response: its URL, header names and error.
func exchangeBytes(x *ledger.HTTPExchange) int {
	n := len(x.Method) + len(x.URL) + len(x.Error)
	for _, h := range x.RequestHeaders {
		n += len(h)
	}
	return n
}

// keep reports whether n more bytes fit in the record, and takes them.
func (l *trafficLog) keep(n int) bool {
	if l.kept+n > MaxTrafficBytes {
		return false
	}
	l.kept += n
	return true
}

// digest is "sha256:" and the hex SHA-256 of b.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// text is s made UTF-8 (the ledger carries text as UTF-8) and cut to max
// bytes.
func text(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// httpRequestOf is a request as the record and a replay compare it.
type httpRequestOf struct {
	method  string
	url     string
	headers []string // names, lower case, sorted
	body    []byte
}

// requestOf is what an http_request asks for, as the record keeps it.
func requestOf(w *httpWireRequest) httpRequestOf {
	r := httpRequestOf{method: strings.ToUpper(w.Method), url: w.URL}
	if r.method == "" {
		r.method = http.MethodGet
	}
	switch {
	case w.Body != nil:
		r.body = []byte(*w.Body)
	case w.BodyBase64 != nil:
		r.body = w.BodyBase64
	}
	if len(w.Headers) > 0 {
		r.headers = make([]string, 0, len(w.Headers))
		for k := range w.Headers {
			r.headers = append(r.headers, strings.ToLower(k))
		}
		sort.Strings(r.headers)
	}
	return r
}

// exchangeOf is the record's entry for request r: method, URL (cut when
// long), header names, the body's size and digest.
func exchangeOf(r httpRequestOf) ledger.HTTPExchange {
	x := ledger.HTTPExchange{Method: text(r.method, 64), URL: text(r.url, maxTrafficURLBytes)}
	if x.URL != r.url {
		x.URLDigest = digest([]byte(r.url))
	}
	for _, h := range r.headers {
		x.RequestHeaders = append(x.RequestHeaders, text(h, 256))
	}
	if len(r.body) > 0 {
		x.RequestBytes, x.RequestDigest = int64(len(r.body)), digest(r.body)
	}
	return x
}

// noteHTTP records one http_request of the call: what it asked (r), and
// the answer it got (res, whose body is data; or err).
func (env *callEnv) noteHTTP(r httpRequestOf, res *httpWireResponse, data []byte, err error, took time.Duration) {
	l := env.trafficLog()
	seq, ok := l.next()
	if !ok {
		return
	}
	x := exchangeOf(r)
	x.Seq, x.DurationMS = seq, took.Milliseconds()
	if err != nil {
		x.Error, x.Denied = text(err.Error(), maxTrafficErrorBytes), isDenied(err)
	}
	// What the plugin sends is its own, but it may join there pieces of
	// a secret it read one by one (secrets.go): the record keeps none.
	if g := env.mod.guard; g != nil && g.withheld != nil {
		x.URL, x.Error = g.withhold(x.URL), g.withhold(x.Error)
		for i, h := range x.RequestHeaders {
			x.RequestHeaders[i] = g.withhold(h)
		}
	}
	if !l.keep(exchangeBytes(&x)) {
		l.drop()
		return
	}
	if err != nil {
		l.rec.HTTP = append(l.rec.HTTP, x)
		return
	}
	x.Status = res.Status
	x.ResponseBytes, x.ResponseDigest = int64(len(data)), digest(data)
	headers := responseHeaders(res.Headers)
	n := len(data)
	for _, h := range headers {
		n += len(h)
	}
	if l.keep(n) {
		x.ResponseHeaders = headers
		if res.Body != nil {
			x.ResponseBody = *res.Body
		} else if len(data) > 0 {
			x.ResponseBodyBase64 = data
		}
	} else {
		x.BodyOmitted = true
	}
	l.rec.HTTP = append(l.rec.HTTP, x)
}

// responseHeaders are a response's headers as the record keeps them:
// "name: value", sorted, a set-cookie's value left out.
func responseHeaders(h map[string]string) []string {
	if len(h) == 0 {
		return nil
	}
	out := make([]string, 0, len(h))
	for k, v := range h {
		if k == "set-cookie" {
			v = notRecorded
		}
		out = append(out, text(k+": "+v, 8<<10))
	}
	sort.Strings(out)
	return out
}

func isDenied(err error) bool { return errors.Is(err, ErrDenied) }

// headersOf turns recorded "name: value" lines back into the headers of
// an http_request's answer.
func headersOf(lines []string) map[string]string {
	h := make(map[string]string, len(lines))
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		h[k] = v
	}
	return h
}

// noteKV records one key-value access of the call. value is what a get
// found or a set wrote; msg what the plugin was told when it failed.
func (env *callEnv) noteKV(op string, key []byte, found bool, value []byte, msg string) {
	l := env.trafficLog()
	seq, ok := l.next()
	if !ok {
		return
	}
	a := ledger.KVAccess{Seq: seq, Op: op, Found: found, Error: text(msg, maxTrafficErrorBytes)}
	if found || op == ledger.KVSet && msg == "" {
		a.ValueBytes, a.ValueDigest = int64(len(value)), digest(value)
	}
	if g := env.mod.guard; g != nil && g.withheld != nil {
		// A key or value the plugin joined pieces of a secret into
		// (secrets.go) is recorded withheld; the digest stays the value's,
		// which shows nothing of it.
		a.Error = g.withhold(a.Error)
		key = []byte(g.withhold(string(key)))
		value = []byte(g.withhold(string(value)))
	}
	if !l.keep(len(key) + len(a.Error)) {
		l.drop()
		return
	}
	if utf8.Valid(key) {
		a.Key = string(key)
	} else {
		a.KeyBase64 = append([]byte(nil), key...)
	}
	if op == ledger.KVGet && found {
		switch {
		case !l.keep(len(value)):
			a.ValueOmitted = true
		case utf8.Valid(value):
			a.Value = string(value)
		default:
			a.ValueBase64 = append([]byte(nil), value...)
		}
	}
	l.rec.KV = append(l.rec.KV, a)
}

// trafficOf is the record of a call's traffic: never nil for a call that
// records it (an empty one when it did nothing through the host
// functions).
func (env *callEnv) trafficOf() *ledger.ToolTraffic {
	if env == nil || env.traffic == nil {
		return &ledger.ToolTraffic{}
	}
	return &env.traffic.rec
}
