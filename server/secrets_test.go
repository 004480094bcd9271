package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
)

// tokenForms are the forms of a token a reader could decode back: as it
// is, percent-encoded, hex, base64 (standard and URL-safe, at each of its
// alignments inside a longer text); compared without regard to case.
func tokenForms(s string) map[string]string {
	forms := map[string]string{"plain": s, "query": url.QueryEscape(s), "hex": hex.EncodeToString([]byte(s))}
	for k := 0; k < 3; k++ {
		for name, enc := range map[string]*base64.Encoding{"base64": base64.RawStdEncoding, "base64url": base64.RawURLEncoding} {
			e := enc.EncodeToString(append(bytes.Repeat([]byte{'.'}, k), s...))
			forms[fmt.Sprintf("%s at %d", name, k)] = e[(8*k+5)/6 : 8*(k+len(s))/6]
		}
	}
	return forms
}

// TestServeSecretReflected: through serve, a plugin whose secret's host
// reflects requests — asked for its answer gzip-compressed, in Range
// pieces, with the secret in a header's name, or a few bytes of it at a
// time which the plugin joins — leaves no form of the secret in the
// session's ledger (its tool results and their traffic records), in what
// the API shows of the session (transcript, events, state), nor in what
// the model was sent. Fails without the host's withholding.
func TestServeSecretReflected(t *testing.T) {
	const token = "tOk3n+Serve.Zq9x_Lp-72Wv~Mr"
	reflector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		echo := "you sent Authorization: " + auth + "\n"
		switch r.URL.Path {
		case "/gzip":
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				io.WriteString(zw, echo)
				zw.Close()
				return
			}
			io.WriteString(w, echo)
		case "/range":
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(echo))
		case "/name":
			w.Header().Set("X-Echo-"+strings.TrimPrefix(auth, "Bearer "), "1")
		case "/slice":
			from, _ := strconv.Atoi(r.URL.Query().Get("from"))
			tok := strings.TrimPrefix(auth, "Bearer ")
			io.WriteString(w, tok[from:min(from+5, len(tok))])
		}
	}))
	defer reflector.Close()
	u, _ := url.Parse(reflector.URL)
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Sandbox = server.SandboxConfig{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
			Secrets: []server.SecretConfig{{Plugin: "reflect", Host: u.Host, Scheme: "bearer", Value: token}}}
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Approve: []string{"http", "cat"}}}
	})})
	kit, _ := filepath.Abs("../pdk/c")
	wasm := plugintest.CPlugin(t, "../plugins/testdata/c", []string{"reflect.c", kit + "/agentic.c"}, []string{kit}, nil)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/reflect", wasm); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	request := func(path string, headers map[string]string) string {
		b, _ := json.Marshal(map[string]any{"url": reflector.URL + path, "headers": headers})
		return string(b)
	}
	var slices []string
	for from := 0; from < len(token); from += 5 {
		slices = append(slices, request("/slice?from="+strconv.Itoa(from), nil))
	}
	ts.model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{
		{Name: "http", Arguments: request("/gzip", map[string]string{"Accept-Encoding": "gzip"})},
		{Name: "http", Arguments: request("/name", nil)},
		{Name: "cat", Arguments: `{"requests":[` + request("/range", map[string]string{"Range": "bytes=0-33"}) + "," + request("/range", map[string]string{"Range": "bytes=34-"}) + "]}"},
		{Name: "cat", Arguments: `{"requests":[` + strings.Join(slices, ",") + "]}"},
		{Name: "cat", Arguments: `{"as":"error","requests":[` + strings.Join(slices, ",") + "]}"},
	}})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"read it back"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}

	var all strings.Builder
	for _, path := range []string{"/v1/sessions/s", "/v1/sessions/s/transcript", "/v1/sessions/s/export", "/v1/plugins/reflect"} {
		_, body := ts.do(t, ts.acme, "GET", path, "")
		all.WriteString(body)
	}
	events, err := ts.store.Load(context.Background(), "acme:s")
	if err != nil || len(events) == 0 {
		t.Fatalf("the session's ledger: %d events, %v", len(events), err)
	}
	for _, e := range events {
		b, _ := json.Marshal(e)
		all.Write(b)
	}
	for _, req := range ts.model.Requests() {
		b, _ := json.Marshal(req)
		all.Write(b)
	}
	text := all.String()
	if n := strings.Count(text, "[secret withheld]"); n < 5 || !strings.Contains(text, "response_headers") {
		t.Errorf("the calls' answers are not in what was searched (%d withheld): %.3000s", n, text)
	}
	low := strings.ToLower(text)
	for name, f := range tokenForms(token) {
		if i := strings.Index(low, strings.ToLower(f)); i >= 0 {
			t.Errorf("the token, %s, in what serve shows: …%s…", name, text[max(0, i-300):min(len(text), i+300)])
		}
	}
}
