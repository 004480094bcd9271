package plugins_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/memory"
)

// trafficWasm builds testdata/c/traffic.c in version v.
func trafficWasm(t testing.TB, v string) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"traffic.c", cKit + "/agentic.c"}, []string{cKit}, []string{`-DVERSION="` + v + `"`})
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestTrafficRecorded: a publish_post call through a host records, in the
// ledger beside its result, its key-value read, its POST (method, URL,
// the names of its headers, its body's digest, the answer) and its
// key-value write; the transcript's tool call shows it; the secret the
// host adds at egress is nowhere in it; and a replay of the ledger's call
// with the blog gone (no network) and its key-value store untouched finds
// the module behaves the same.
func TestTrafficRecorded(t *testing.T) {
	const secret = "s3cr3t-traffic-never-recorded"
	var posts atomic.Int64
	var gotBody []byte
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != secret {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		gotBody, _ = io.ReadAll(r.Body)
		n := posts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=abc123")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"post-%d","url":"https://blog.example/p/%d"}`, n, n)
	}))
	defer blog.Close()
	bu, _ := url.Parse(blog.URL)
	endpoint := blog.URL + "/api/posts?draft=0"

	kv := memory.New()
	rt := plugintest.Runtime(t, plugins.Options{KV: kv})
	grant := plugins.Grant{KV: true, AllowedHosts: []string{bu.Host}, AllowPrivateNetwork: true,
		Secrets: []plugins.EgressSecret{{Host: bu.Host, Header: "X-Api-Key", Value: secret}}}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits {
			return plugins.Limits{KV: true, AllowedHosts: []string{bu.Host}, AllowPrivateNetwork: true}
		},
		Grants: func(string, string) plugins.Grant { return grant },
		Config: func(string, string) map[string]string { return map[string]string{"endpoint": endpoint} },
	})
	defer reg.Close(context.Background())
	m, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := hosttest.New(t, host.Options{Agent: host.Agent{Toolsets: []host.Toolset{reg.Toolset("acme")},
		ToolApprovals: map[string]host.ApprovalMode{"publish_post": host.ApproveAlways}}})
	hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish_post", Arguments: `{"title":"Hello","body":"First post."}`}}})
	if res, err := hs.Host.Session("s1").Send(context.Background(), "publish it", host.SendOptions{}); err != nil || res.Status != "completed" {
		t.Fatalf("send: %+v, %v", res, err)
	}
	events := hs.Events("s1")
	calls := ledger.RecordedCalls(events)
	if len(calls) != 1 {
		t.Fatalf("recorded calls: %+v", calls)
	}
	rc := calls[0]
	tr := rc.Result.Traffic
	if tr == nil || rc.Result.IsError {
		t.Fatalf("the result: %+v", rc.Result)
	}
	key := "publish_post/" + rc.Call.ID
	if len(tr.KV) != 2 || tr.KV[0].Op != ledger.KVGet || tr.KV[0].Key != key || tr.KV[0].Found ||
		tr.KV[1].Op != ledger.KVSet || tr.KV[1].Key != key || tr.KV[1].ValueDigest == "" || tr.KV[1].Seq != 2 {
		t.Errorf("KV record: %+v", tr.KV)
	}
	if len(tr.HTTP) != 1 {
		t.Fatalf("HTTP record: %+v", tr.HTTP)
	}
	x := tr.HTTP[0]
	if x.Seq != 1 || x.Method != "POST" || x.URL != endpoint || x.Status != 201 || x.ResponseBody != `{"id":"post-1","url":"https://blog.example/p/1"}` ||
		x.RequestBytes != int64(len(gotBody)) || x.RequestDigest != sha(gotBody) || x.ResponseDigest != sha([]byte(x.ResponseBody)) ||
		strings.Join(x.RequestHeaders, ",") != "content-type,idempotency-key" || x.Error != "" || x.BodyOmitted {
		t.Errorf("HTTP record: %+v", x)
	}
	if !strings.Contains(strings.Join(x.ResponseHeaders, "\n"), "set-cookie: (not recorded)") ||
		!strings.Contains(strings.Join(x.ResponseHeaders, "\n"), "content-type: application/json") {
		t.Errorf("response headers: %q", x.ResponseHeaders)
	}
	if tr.Truncated || tr.Summary() != "1 HTTP request, 2 KV accesses (1 written)" {
		t.Errorf("record: truncated %v, %q", tr.Truncated, tr.Summary())
	}

	// The transcript's tool call carries it; the wire one without the body.
	transcript := ledger.ProjectSession("s1", events)
	var shown *ledger.ItemToolCall
	for i := range transcript.Items {
		for j := range transcript.Items[i].ToolCalls {
			shown = &transcript.Items[i].ToolCalls[j]
		}
	}
	if shown == nil || shown.Traffic == nil || len(shown.Traffic.HTTP) != 1 || shown.Traffic.HTTP[0].URL != endpoint {
		t.Errorf("the transcript's tool call: %+v", shown)
	}

	// The secret is nowhere in the ledger, nor its cookie.
	var all bytes.Buffer
	for _, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, never := range []string{"s3cr3t", "abc123"} {
		if strings.Contains(all.String(), never) {
			t.Errorf("%q shows in the ledger:\n%s", never, all.String())
		}
	}

	// A replay, with the blog closed and the store watched.
	blog.Close()
	before, _ := kv.Keys(context.Background(), plugins.StorageNamespace+"acme")
	call := host.ToolCall{ID: rc.Call.ID, SessionID: "s1", Name: rc.Call.Name, Input: json.RawMessage(rc.Call.Arguments)}
	rp, err := plugins.ReplayCall(context.Background(), m, call, rc.Result)
	if err != nil {
		t.Fatal(err)
	}
	if rp.Verdict != plugins.ReplaySame || len(rp.Divergences) != 0 || rp.Output != rc.Result.Output {
		t.Fatalf("replay: %+v", rp)
	}
	if rp.Traffic == nil || len(rp.Traffic.HTTP) != 1 || rp.Traffic.HTTP[0].ResponseBody != x.ResponseBody {
		t.Errorf("the replay's traffic: %+v", rp.Traffic)
	}
	after, _ := kv.Keys(context.Background(), plugins.StorageNamespace+"acme")
	if len(after) != len(before) || posts.Load() != 1 {
		t.Errorf("the replay touched the world: keys %v → %v, posts %d", before, after, posts.Load())
	}
}

// trafficServer answers traffic.c's requests, counting them.
func trafficServer(t *testing.T, big int) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		switch r.URL.Path {
		case "/item":
			w.Write([]byte(`{"item":"apple"}`))
		case "/extra":
			w.Write([]byte(`{"extra":true}`))
		case "/notes":
			body, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"saved":%q}`, body)
		case "/big":
			w.Write(bytes.Repeat([]byte{0xff, 'x'}, big/2)) // not UTF-8: base64 in the record
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func trafficLimits(srv *httptest.Server) plugins.Limits {
	u, _ := url.Parse(srv.URL)
	return plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, Fuel: 50_000_000_000}
}

// TestReplayDiverges: a call of traffic.c's sync recorded on version A
// replays the same on A, without a request reaching the server, and
// diverges on B (another body) and C (another request first), each
// divergence naming the request and what differs; a record edited to
// miss a request, or another result, diverges too.
func TestReplayDiverges(t *testing.T) {
	srv, served := trafficServer(t, 0)
	rt, _ := newRuntime(t)
	a := load(t, rt, "traffic", trafficWasm(t, "A"), trafficLimits(srv))
	call := host.ToolCall{ID: "call-1", SessionID: "s1", Name: "sync", Input: json.RawMessage(`{"base":"` + srv.URL + `"}`)}
	tool, _ := a.Tool("sync")
	res, err := tool.Call(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	recorded := ledger.ToolResult{CallID: call.ID, Name: "sync", Output: res.Output, Source: res.Source, Traffic: res.Traffic}
	if tr := res.Traffic; tr == nil || len(tr.HTTP) != 2 || len(tr.KV) != 2 || tr.HTTP[1].Method != "POST" {
		t.Fatalf("record: %+v", tr)
	}
	count := served.Load()

	replay := func(m *plugins.Module, rec ledger.ToolResult) plugins.Replay {
		t.Helper()
		rp, err := plugins.ReplayCall(context.Background(), m, call, rec)
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}
	if rp := replay(a, recorded); rp.Verdict != plugins.ReplaySame {
		t.Errorf("A on A: %+v", rp)
	}
	// The store still says 1: the replay wrote nothing, and read the
	// recorded 0.
	if rp := replay(a, recorded); rp.Verdict != plugins.ReplaySame {
		t.Errorf("A on A again: %+v", rp)
	}

	b := load(t, rt, "traffic-b", trafficWasm(t, "B"), trafficLimits(srv))
	rp := replay(b, recorded)
	if rp.Verdict != plugins.ReplayDiverged || len(rp.Divergences) == 0 ||
		!strings.Contains(rp.Divergences[0], "HTTP request 2 (POST "+srv.URL+"/notes): body of ") {
		t.Errorf("B on A: %+v", rp)
	}
	c := load(t, rt, "traffic-c", trafficWasm(t, "C"), trafficLimits(srv))
	rp = replay(c, recorded)
	if rp.Verdict != plugins.ReplayDiverged || len(rp.Divergences) == 0 ||
		!strings.Contains(rp.Divergences[0], "HTTP request 1 (GET "+srv.URL+"/item): URL "+srv.URL+"/extra, recorded "+srv.URL+"/item") ||
		!strings.Contains(strings.Join(rp.Divergences, "\n"), "HTTP request 3 (POST "+srv.URL+"/notes) is not in the record: the call made 2") {
		t.Errorf("C on A: %+v", rp)
	}

	fewer := recorded
	fewer.Traffic = &ledger.ToolTraffic{HTTP: recorded.Traffic.HTTP[:1], KV: recorded.Traffic.KV}
	rp = replay(a, fewer)
	if rp.Verdict != plugins.ReplayDiverged || !strings.Contains(rp.Divergences[0], "HTTP request 2 (POST "+srv.URL+"/notes) is not in the record: the call made 1") {
		t.Errorf("a record missing the POST: %+v", rp)
	}
	more := recorded
	more.Traffic = &ledger.ToolTraffic{HTTP: append(append([]ledger.HTTPExchange(nil), recorded.Traffic.HTTP...),
		ledger.HTTPExchange{Seq: 4, Method: "GET", URL: srv.URL + "/later"}), KV: recorded.Traffic.KV}
	rp = replay(a, more)
	if rp.Verdict != plugins.ReplayDiverged || !strings.Contains(strings.Join(rp.Divergences, "\n"), "the replay made 2 HTTP requests, the call recorded 3: request 3 (GET "+srv.URL+"/later) was not made") {
		t.Errorf("a record with a request more: %+v", rp)
	}
	other := recorded
	other.Output = `{"count":7}`
	rp = replay(a, other)
	if rp.Verdict != plugins.ReplayDiverged || len(rp.Divergences) != 1 || !strings.HasPrefix(rp.Divergences[0], "the result differs: output ") {
		t.Errorf("another output: %+v", rp)
	}
	if served.Load() != count {
		t.Errorf("replays reached the server: %d requests, %d before", served.Load(), count)
	}

	// A call the sandbox refused the store replays the same: its record
	// names the key refused, and the refusal.
	noKV := trafficLimits(srv)
	noKV.KV = false
	d := load(t, rt, "traffic-nokv", trafficWasm(t, "A"), noKV)
	dt, _ := d.Tool("sync")
	res, err = dt.Call(context.Background(), call)
	if err == nil || len(res.Traffic.KV) != 1 || res.Traffic.KV[0].Key != "count" || !strings.Contains(res.Traffic.KV[0].Error, "not enabled") {
		t.Fatalf("a call refused the store: %v, %+v", err, res.Traffic)
	}
	refused := ledger.ToolResult{CallID: call.ID, Name: "sync", Output: "error: " + err.Error(), IsError: true, Source: res.Source, Traffic: res.Traffic}
	if rp := replay(d, refused); rp.Verdict != plugins.ReplaySame {
		t.Errorf("a call refused the store: %+v", rp)
	}

	if _, err := plugins.ReplayCall(context.Background(), nil, call, recorded); err == nil {
		t.Error("ReplayCall without a module: no error")
	}
	var none ledger.ToolResult
	if rp := replay(a, none); rp.Verdict != plugins.ReplayNotReplayable || !strings.Contains(rp.Reason, "no traffic was recorded") {
		t.Errorf("no record: %+v", rp)
	}
}

// TestTrafficBounded: a hostile call that reads the store thousands of
// times and fetches megabytes over and over keeps a bounded record — at
// most MaxTrafficEntries entries, at most MaxTrafficBytes of bodies, the
// rest counted — that says it is not whole, and a replay refuses it.
func TestTrafficBounded(t *testing.T) {
	srv, _ := trafficServer(t, 200<<10)
	rt, _ := newRuntime(t)
	limits := trafficLimits(srv)
	limits.MaxHTTPRequests = 40
	// 6,000 host-function calls and 40 requests of 200 KiB: a loaded
	// machine under -race needs more than the default 5 s; the bound
	// tested is the record's, not the time's.
	limits.CallTimeout = 2 * time.Minute
	m := load(t, rt, "traffic", trafficWasm(t, "A"), limits)
	call := host.ToolCall{ID: "call-1", SessionID: "s1", Name: "flood", Input: json.RawMessage(`{"base":"` + srv.URL + `","n":3000}`)}
	tool, _ := m.Tool("flood")
	res, err := tool.Call(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Traffic
	if tr == nil || !tr.Truncated || len(tr.HTTP)+len(tr.KV) != plugins.MaxTrafficEntries || tr.Dropped != 6000-plugins.MaxTrafficEntries {
		t.Fatalf("record: truncated %v, %d + %d entries, %d dropped", tr.Truncated, len(tr.HTTP), len(tr.KV), tr.Dropped)
	}
	var kept, omitted int
	for _, x := range tr.HTTP {
		kept += len(x.ResponseBody) + len(x.ResponseBodyBase64)
		if x.BodyOmitted {
			omitted++
			if x.ResponseDigest == "" || x.ResponseBytes != 200<<10 {
				t.Errorf("an omitted body without its digest or size: %+v", x)
			}
		}
	}
	if kept > plugins.MaxTrafficBytes || omitted == 0 {
		t.Errorf("kept %d bytes of bodies, %d omitted", kept, omitted)
	}
	e := ledger.Event{ID: "e", Kind: ledger.KindToolResult, RunID: "r", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		ToolResult: &ledger.ToolResult{CallID: call.ID, Name: "flood", Output: res.Output, Traffic: tr}}
	b, err := ledger.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 2*plugins.MaxTrafficBytes {
		t.Errorf("the tool result takes %d bytes in the ledger", len(b))
	}
	rp, err := plugins.ReplayCall(context.Background(), m, call, *e.ToolResult)
	if err != nil || rp.Verdict != plugins.ReplayNotReplayable || !strings.Contains(rp.Reason, "more host-function calls than the record keeps") {
		t.Errorf("replay of a truncated record: %+v, %v", rp, err)
	}
	// Long URLs and many headers: the texts are bounded too.
	call.Input = json.RawMessage(`{"base":"` + srv.URL + `","n":40,"pad":1900}`)
	res, err = tool.Call(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	e.ToolResult.Traffic = res.Traffic
	if b, err = ledger.Encode(e); err != nil {
		t.Fatal(err)
	}
	if !res.Traffic.Truncated || len(b) > 2*plugins.MaxTrafficBytes {
		t.Errorf("long URLs and headers: truncated %v, %d bytes in the ledger, %d requests recorded", res.Traffic.Truncated, len(b), len(res.Traffic.HTTP))
	}
	// Bodies alone: a few big responses, no entry dropped.
	call.Input = json.RawMessage(`{"base":"` + srv.URL + `","n":4}`)
	res, err = tool.Call(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	if res.Traffic.Truncated {
		t.Fatalf("4 + 4 accesses truncated: %+v", res.Traffic)
	}
	rp, err = plugins.ReplayCall(context.Background(), m, call, ledger.ToolResult{CallID: call.ID, Name: "flood", Output: res.Output, Traffic: res.Traffic})
	if err != nil || rp.Verdict != plugins.ReplayNotReplayable || !strings.Contains(rp.Reason, "response bodies not recorded in full") {
		t.Errorf("replay of a record without its bodies: %+v, %v", rp, err)
	}
}

// TestTrafficLongURL: a request whose URL is over 2 KiB is recorded cut
// there (marked "…"), with url_digest the digest of the whole URL, so that
// what the plugin asked stays checkable while the record stays bounded; a
// URL within 2 KiB is kept whole, without a digest.
func TestTrafficLongURL(t *testing.T) {
	srv, _ := trafficServer(t, 1<<10)
	rt, _ := newRuntime(t)
	m := load(t, rt, "traffic", trafficWasm(t, "A"), trafficLimits(srv))
	tool, _ := m.Tool("flood")
	for _, pad := range []int{100, 2100} {
		input := fmt.Sprintf(`{"base":%q,"n":1,"pad":%d}`, srv.URL, pad)
		res, err := tool.Call(context.Background(), host.ToolCall{ID: "c", SessionID: "s", Name: "flood", Input: json.RawMessage(input)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Traffic == nil || len(res.Traffic.HTTP) != 1 {
			t.Fatalf("pad %d: record %+v, want one request", pad, res.Traffic)
		}
		x := res.Traffic.HTTP[0]
		full := srv.URL + "/big?pad=" + strings.Repeat("x", pad)
		if len(full) <= 2048 {
			if x.URL != full || x.URLDigest != "" {
				t.Errorf("a URL of %d bytes recorded as %d bytes, digest %q: want it whole, no digest", len(full), len(x.URL), x.URLDigest)
			}
			continue
		}
		if x.URL != full[:2048]+"…" || x.URLDigest != sha([]byte(full)) {
			t.Errorf("a URL of %d bytes recorded as %d bytes ending %q, digest %q: want its first 2 KiB marked cut, and the whole one's digest",
				len(full), len(x.URL), x.URL[max(0, len(x.URL)-8):], x.URLDigest)
		}
	}
}
