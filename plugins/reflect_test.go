package plugins_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	extism "github.com/extism/go-sdk"
)

// reflectWasm builds testdata/c/reflect.c: tools that hand back the host's
// answers to their HTTP requests (http), or join their bodies (cat).
func reflectWasm(t testing.TB) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"reflect.c", cKit + "/agentic.c"}, []string{cKit}, nil)
}

// The secret the reflecting tests bind to the reflector: a bearer token
// whose characters encode differently in a URL ('+', '~'), in any case.
const (
	reflectToken  = "tOk3n+Echo.Zq9x_Lp-72Wv~Mr"
	reflectSecret = "Bearer " + reflectToken
)

// secretForms are the forms of s a reader could decode back: as it is,
// percent-encoded (a query's, a path's, every byte), base64 (standard and
// URL-safe, at each of the three alignments it can have inside a longer
// text, padded or not), hex, JSON's and HTML's escapes of every byte.
// The test compares them without regard to case.
func secretForms(s string) map[string]string {
	forms := map[string]string{
		"plain": s, "query": url.QueryEscape(s), "path": url.PathEscape(s),
		"hex": hex.EncodeToString([]byte(s)),
	}
	var every, json, html strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&every, "%%%02X", c)
		fmt.Fprintf(&json, `\u%04x`, c)
		fmt.Fprintf(&html, "&#%d;", c)
	}
	forms["every byte"], forms["json"], forms["html"] = every.String(), json.String(), html.String()
	for k := 0; k < 3; k++ {
		for name, enc := range map[string]*base64.Encoding{"base64": base64.RawStdEncoding, "base64url": base64.RawURLEncoding} {
			e := enc.EncodeToString(append(bytes.Repeat([]byte{'.'}, k), s...))
			// The characters that hold bits of s alone.
			from, to := (8*k+5)/6, 8*(k+len(s))/6
			forms[fmt.Sprintf("%s at %d", name, k)] = e[from:to]
		}
	}
	return forms
}

// leak returns the name of the first form of s that text holds, "" when
// none does.
func leak(text, s string) string {
	// (Lines joined again: base64 cut in lines is read as one.)
	low := strings.ToLower(strings.NewReplacer("\n", "", "\r", "", `\n`, "", `\r`, "").Replace(text))
	for name, f := range secretForms(s) {
		if strings.Contains(low, strings.ToLower(f)) {
			return name
		}
	}
	return ""
}

// answerTexts are the texts of an http tool's output — the host's answer
// — with its body decoded from base64 and then from gzip or zlib when it
// is compressed: what the plugin could read.
func answerTexts(out string) []string {
	texts := []string{out}
	var a struct {
		Headers    map[string]string `json:"headers"`
		Body       string            `json:"body"`
		BodyBase64 string            `json:"body_base64"`
	}
	if json.Unmarshal([]byte(out), &a) != nil {
		return texts
	}
	for k, v := range a.Headers {
		texts = append(texts, k, v)
	}
	body := []byte(a.Body)
	if a.BodyBase64 != "" {
		body, _ = base64.StdEncoding.DecodeString(a.BodyBase64)
	}
	texts = append(texts, string(body))
	if r, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
		b, _ := io.ReadAll(r)
		texts = append(texts, string(b))
	}
	if r, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
		b, _ := io.ReadAll(r)
		texts = append(texts, string(b))
	}
	return texts
}

// newReflector starts a host that reflects the Authorization header it is
// sent, in the ways a plugin after the secret could ask a debug endpoint,
// an error page or an httpbin to: see the cases of TestSecretReflected.
func newReflector(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		token := strings.TrimPrefix(auth, "Bearer ")
		echo := "you sent Authorization: " + auth + "\n"
		q := r.URL.Query()
		compress := func(enc string) {
			var buf bytes.Buffer
			var zw io.WriteCloser = gzip.NewWriter(&buf)
			if enc == "deflate" {
				zw = zlib.NewWriter(&buf)
			}
			zw.Write([]byte(echo))
			zw.Close()
			w.Header().Set("Content-Encoding", enc)
			w.Write(buf.Bytes())
		}
		switch r.URL.Path {
		case "/echo":
			io.WriteString(w, echo)
		case "/gzip": // compressed when asked
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				compress("gzip")
				return
			}
			io.WriteString(w, echo)
		case "/always-gzip": // compressed whatever was asked (httpbin's /gzip)
			compress("gzip")
		case "/always-x-gzip": // gzip under its old name
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write([]byte(echo))
			zw.Close()
			w.Header().Set("Content-Encoding", "x-gzip")
			w.Write(buf.Bytes())
		case "/stacked": // gzip, then deflate over it
			layers := q["layer"]
			body := []byte(echo)
			for _, enc := range layers {
				var buf bytes.Buffer
				var zw io.WriteCloser = gzip.NewWriter(&buf)
				if enc == "deflate" {
					zw = zlib.NewWriter(&buf)
				}
				zw.Write(body)
				zw.Close()
				body = buf.Bytes()
			}
			w.Header().Set("Content-Encoding", strings.Join(layers, ", "))
			w.Write(body)
		case "/asked": // what the request asked for, without the secret
			fmt.Fprintf(w, "accept-encoding=%q range=%q if-range=%q\n", r.Header.Get("Accept-Encoding"), r.Header.Get("Range"), r.Header.Get("If-Range"))
		case "/always-deflate":
			compress("deflate")
		case "/empty-gzip": // compressed, and empty (as a HEAD's answer is)
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusNoContent)
		case "/br": // an encoding the host cannot read
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, echo)
		case "/range": // a resource that serves ranges
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(echo))
		case "/name": // the token in a header's name
			w.Header().Set("X-Echo-"+token, "1")
			io.WriteString(w, "see the headers\n")
		case "/form": // one form of the value, or of the token alone
			s := auth
			if q.Get("of") == "token" {
				s = token
			}
			form := secretForms(s)[q.Get("f")]
			if q.Get("case") == "upper" {
				form = strings.ToUpper(form)
			}
			io.WriteString(w, "x="+form+"&y=1\n")
		case "/padded": // base64 with its padding, standard and URL-safe
			fmt.Fprintf(w, "%s %s %s\n", base64.StdEncoding.EncodeToString([]byte(auth)), base64.URLEncoding.EncodeToString([]byte(token)),
				base64.StdEncoding.EncodeToString([]byte("user:"+token)))
		case "/wrapped": // base64 cut in lines of 16, as MIME cuts at 76
			e := base64.StdEncoding.EncodeToString([]byte(echo))
			for len(e) > 16 {
				fmt.Fprintln(w, e[:16])
				e = e[16:]
			}
			fmt.Fprintln(w, e)
		case "/redirect": // the token in where it sends the client next
			http.Redirect(w, r, q.Get("to")+"?token="+url.QueryEscape(token), http.StatusFound)
		case "/cookie":
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: base64.URLEncoding.EncodeToString([]byte(token))})
			io.WriteString(w, "a cookie\n")
		case "/slice": // the bytes of the token the query asks for
			from, _ := strconv.Atoi(q.Get("from"))
			to, _ := strconv.Atoi(q.Get("to"))
			to = min(to, len(token))
			io.WriteString(w, token[from:to])
		case "/malformed": // a response Go's client cannot read, quoting it
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			buf.WriteString("HTTP/1.1_" + token + "\r\n\r\n") // no space: quoted whole
			buf.Flush()
			conn.Close()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// reflectModule loads the reflect plugin with the secret bound to srv.
func reflectModule(t *testing.T, srv *httptest.Server, maxRedirects int) (*plugins.Module, *logBuffer) {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	rt, logs := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, MaxRedirects: maxRedirects,
		Secrets: []plugins.EgressSecret{{Host: u.Host, Header: "Authorization", Value: reflectSecret}}})
	return m, logs
}

// callTexts calls the module's tool and returns every text the call left:
// its output (with the answers inside it decoded, see answerTexts), its
// error, its traffic record, and the log.
func callTexts(t *testing.T, m *plugins.Module, logs *logBuffer, tool, input string) (host.ToolResult, []string, error) {
	t.Helper()
	tl, ok := m.Tool(tool)
	if !ok {
		t.Fatalf("no tool %s", tool)
	}
	res, err := tl.Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s1", Name: tool, Input: json.RawMessage(input)})
	texts := answerTexts(res.Output)
	if err != nil {
		texts = append(texts, err.Error())
	}
	b, _ := json.Marshal(res.Traffic)
	texts = append(texts, string(b), logs.String())
	return res, texts, err
}

// request is an http_request's JSON.
func request(u string, headers map[string]string) string {
	b, _ := json.Marshal(map[string]any{"method": "GET", "url": u, "headers": headers})
	return string(b)
}

// TestSecretReflected: a plugin whose secret's host reflects requests
// cannot read the secret back in any form the host answers it in —
// compressed at the plugin's request or whatever it asked, split across
// Range requests, in a header's name, percent-encoded, base64 (padded or
// not, URL-safe, at any alignment, cut in lines), hex, JSON or HTML
// escapes, any case, in a redirect's Location or a cookie — nor find it in
// the call's output, error, record or log. Every case fails without the
// host's scrubbing and the request headers it sets on a request that
// carries a secret (Accept-Encoding: identity, no Range).
func TestSecretReflected(t *testing.T) {
	srv := newReflector(t)
	m, logs := reflectModule(t, srv, 0)
	follows, followsLogs := reflectModule(t, srv, 2) // follows redirects
	type tc struct {
		name, tool, input string
		want              string // in the output: the call went through
		follow            bool
	}
	cases := []tc{
		{"plain", "http", request(srv.URL+"/echo", nil), "[secret withheld]", false},
		{"gzip asked", "http", request(srv.URL+"/gzip", map[string]string{"Accept-Encoding": "gzip"}), "[secret withheld]", false},
		{"gzip unasked", "http", request(srv.URL+"/always-gzip", nil), "[secret withheld]", false},
		{"deflate unasked", "http", request(srv.URL+"/always-deflate", nil), "[secret withheld]", false},
		{"compressed and empty", "http", request(srv.URL+"/empty-gzip", nil), `"status":204`, false},
		{"an encoding the host cannot read", "http", request(srv.URL+"/br", nil), "denied", false},
		{"x-gzip unasked", "http", request(srv.URL+"/always-x-gzip", nil), "[secret withheld]", false},
		{"two encodings stacked", "http", request(srv.URL+"/stacked?layer=gzip&layer=deflate", nil), "[secret withheld]", false},
		{"three encodings stacked", "http", request(srv.URL+"/stacked?layer=gzip&layer=deflate&layer=gzip", nil), "denied", false},
		{"what the request asked", "http", request(srv.URL+"/asked", map[string]string{"Accept-Encoding": "gzip, br", "Range": "bytes=0-9", "If-Range": `"v1"`}),
			`accept-encoding=\"identity\" range=\"\" if-range=\"\"`, false},
		{"range", "cat", `{"requests":[` + request(srv.URL+"/range", map[string]string{"Range": "bytes=0-33"}) + "," +
			request(srv.URL+"/range", map[string]string{"Range": "bytes=34-"}) + `]}`, "[secret withheld]", false},
		{"header name", "http", request(srv.URL+"/name", nil), "[secret withheld]", false},
		{"padded base64", "http", request(srv.URL+"/padded", nil), "[secret withheld]", false},
		{"base64 in lines", "http", request(srv.URL+"/wrapped", nil), `"status":200`, false},
		{"redirect", "http", request(srv.URL+"/redirect?to=/echo", nil), "location", false},
		{"redirect followed", "http", request(srv.URL+"/redirect?to=/echo", nil), "[secret withheld]", true},
		{"redirect elsewhere", "http", request(srv.URL+"/redirect?to=http://elsewhere.example/", nil), "not among the hosts", true},
		{"cookie", "http", request(srv.URL+"/cookie", nil), "set-cookie", false},
		{"malformed", "http", request(srv.URL+"/malformed", nil), "error", false},
	}
	for name := range secretForms(reflectSecret) {
		for _, of := range []string{"value", "token"} {
			for _, c := range []string{"", "upper"} {
				q := url.Values{"f": {name}, "of": {of}, "case": {c}}
				cases = append(cases, tc{fmt.Sprintf("%s of the %s %s", name, of, c), "http", request(srv.URL+"/form?"+q.Encode(), nil), `"status":200`, false})
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, logs := m, logs
			if c.follow {
				m, logs = follows, followsLogs
			}
			res, texts, err := callTexts(t, m, logs, c.tool, c.input)
			if !strings.Contains(res.Output, c.want) && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("want %q in the answer: %s, %v", c.want, res.Output, err)
			}
			for _, text := range texts {
				if form := leak(text, reflectToken); form != "" {
					t.Fatalf("the token, %s, in what the call left: %.1500s", form, text)
				}
			}
		})
	}
}

// TestSecretReassembled: a host that hands out the secret a few bytes at a
// time (here by a query; a Range request is dropped from a request that
// carries a secret) gives a plugin pieces too short to be recognised, which
// it joins: the joined secret is withheld from the call's output, its log
// line and its error as from an answer.
func TestSecretReassembled(t *testing.T) {
	srv := newReflector(t)
	m, logs := reflectModule(t, srv, 0)
	var reqs []string
	for from := 0; from < len(reflectToken); from += 5 {
		reqs = append(reqs, request(fmt.Sprintf("%s/slice?from=%d&to=%d", srv.URL, from, from+5), nil))
	}
	// Extism's own log functions reach the host's logger once Extism's
	// process-wide level lets them.
	extism.SetLogLevel(extism.LogLevelInfo)
	t.Cleanup(func() { extism.SetLogLevel(extism.LogLevelOff) })
	for _, as := range []string{"output", "log", "extism_log", "error"} {
		t.Run(as, func(t *testing.T) {
			res, texts, err := callTexts(t, m, logs, "cat", `{"as":"`+as+`","requests":[`+strings.Join(reqs, ",")+`]}`)
			if as == "error" && err == nil || as != "error" && err != nil {
				t.Fatalf("%s: %v", res.Output, err)
			}
			if (as == "log" || as == "extism_log") && !strings.Contains(logs.String(), "[secret withheld]") {
				t.Errorf("the log line: %s", logs.String())
			}
			for _, text := range texts {
				if form := leak(text, reflectToken); form != "" {
					t.Fatalf("the token, %s, in what the call left: %.1500s", form, text)
				}
			}
		})
	}
}

// TestAllowedHostPorts: an allowed host named without a port is its
// scheme's default port (80 for http, 443 for https), not every port; a
// secret bound to a host without a port goes on https to port 443 only,
// and one bound to host:port to that port only, a redirect to another
// port of the same host going without it.
func TestAllowedHostPorts(t *testing.T) {
	l := plugins.Limits{AllowedHosts: []string{"api.example.com", "dev.example.com:8080", "*.example.org"}}
	for u, want := range map[string]bool{
		"https://api.example.com/": true, "http://api.example.com/": true, "https://api.example.com:443/": true,
		"http://api.example.com:80/": true, "https://api.example.com:8443/": false, "http://api.example.com:443/": false,
		"https://api.example.com:80/": false, "http://api.example.com:22/": false, "http://dev.example.com:8080/": true,
		"https://dev.example.com:8080/": true, "https://dev.example.com/": false, "https://a.example.org/": true,
		"https://a.example.org:6379/": false,
	} {
		if err := l.Allows(u); (err == nil) != want {
			t.Errorf("%s: %v, want allowed %v", u, err, want)
		}
	}

	// Through a plugin's request: 127.0.0.1 without a port does not
	// reach a server on another port.
	var mu sync.Mutex
	var got []string // the secrets' headers each server was sent
	note := func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Host+" "+r.Header.Get("Authorization")+"|"+r.Header.Get("X-First"))
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { note(r); io.WriteString(w, "other") }))
	defer other.Close()
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note(r)
		http.Redirect(w, r, other.URL+"/next", http.StatusFound)
	}))
	defer first.Close()
	fu, _ := url.Parse(first.URL)
	ou, _ := url.Parse(other.URL)
	rt, _ := newRuntime(t)
	portless := load(t, rt, "portless", reflectWasm(t), plugins.Limits{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true})
	res, err := callTool(t, portless, "http", request(other.URL+"/", nil))
	if err != nil || !strings.Contains(res.Output, "not among the hosts this plugin may reach") {
		t.Errorf("127.0.0.1 without a port, a request to %s: %s, %v", ou.Host, res.Output, err)
	}
	secrets := load(t, rt, "secrets", reflectWasm(t), plugins.Limits{AllowedHosts: []string{"127.0.0.1", fu.Host, ou.Host}, AllowPrivateNetwork: true, MaxRedirects: 2,
		Secrets: []plugins.EgressSecret{{Host: "127.0.0.1", Header: "Authorization", Value: "Bearer portless-secret"},
			{Host: fu.Host, Header: "X-First", Value: "first-port-secret"}}})
	if res, err := callTool(t, secrets, "http", request(first.URL+"/", nil)); err != nil || !strings.Contains(res.Output, `"status":200`) {
		t.Fatalf("through the redirect: %s, %v", res.Output, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{fu.Host + " |first-port-secret", ou.Host + " |"}; !slices.Equal(got, want) {
		t.Errorf("the servers were sent %q, want %q: the secret bound to 127.0.0.1 on neither (https to 443 only), the one bound to %s on its port only", got, want, fu.Host)
	}
}
