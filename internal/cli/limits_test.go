//go:build unix

package cli_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// trickle sends a request over a new connection to addr: its head, then
// its body of n bytes one byte every gap. It returns the connection, for
// the response.
func trickle(t *testing.T, addr, head string, n int, gap time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n", head, n); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range n {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	return c
}

// closedAfter reads c past a response and reports whether the server had
// closed the connection: an end of file, or a reset, which is what a
// server's kernel answers the bytes trickle goes on sending once the
// server has closed its end.
func closedAfter(c net.Conn) error {
	_, err := c.Read(make([]byte, 1))
	if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	return fmt.Errorf("read %v, want an end of file or a reset", err)
}

// TestMCPSlowBodiesAndIdleConnections: mcp --http bounds a POST's body as
// serve does (--body-timeout: 408, the connection closed), and closes a
// kept-alive connection idle past --idle-timeout.
func TestMCPSlowBodiesAndIdleConnections(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	const key = "mcp-limits-key"
	url, _ := mcpHTTP(t, bin, key, "--plugins", t.TempDir(), "--body-timeout", "1s", "--idle-timeout", "1s")
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	start := time.Now()
	c := trickle(t, addr, "POST /mcp HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer "+key+"\r\n", 1000, 200*time.Millisecond)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body sent one byte every 200ms: %v after %v", err, time.Since(start))
	}
	// The body would take 200 s to arrive: an answer a minute in at most
	// is the timeout's, on however loaded a machine.
	if res.StatusCode != http.StatusRequestTimeout || time.Since(start) > time.Minute {
		t.Fatalf("%d after %v, want 408 after about 1s", res.StatusCode, time.Since(start))
	}
	io.ReadAll(res.Body)
	if err := closedAfter(c); err != nil {
		t.Errorf("the connection is still open after the 408: %v", err)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	br := bufio.NewReader(idle)
	fmt.Fprintf(idle, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if res, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		io.ReadAll(res.Body)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("a connection idle past --idle-timeout (1s): %v, want it closed", err)
	}
}

// TestServeAndMCPAgree: the small things serve and mcp --http did apart.
// Both take the bearer scheme in any case; serve refuses a path that is
// not clean with 400 rather than redirect a POST elsewhere, and names JSON
// types, not Go ones, in the UI chat route's errors; mcp --http refuses a
// browser's request from another origin, and one whose Host names another
// site (DNS rebinding).
func TestServeAndMCPAgree(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	s := startServe(t, "serve", bin, writeServeConfig(t, "file:"+t.TempDir(), model.URL(), ""))
	do := func(method, url, body string, header ...string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
				continue
			}
			req.Header.Set(header[i], header[i+1])
		}
		// No redirects followed: a 307 shows as itself.
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := do("GET", s.url+"/v1/sessions", "", "Authorization", "bearer "+serveKey); code != http.StatusOK {
		t.Errorf("serve with \"bearer\" in lower case: %d %s", code, body)
	}
	for _, p := range []string{"/v1/sessions/../sessions/x/messages", "/v1/sessions/./x/messages", "/v1//sessions/x/messages"} {
		if code, body := do("POST", s.url+p, `{"text":"hi"}`, "Authorization", "Bearer "+serveKey); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s, want 400", p, code, body)
		}
	}
	code, body := do("POST", s.url+"/v1/ui/chat", `[]`, "Authorization", "Bearer "+serveKey, "Content-Type", "application/json")
	if code != http.StatusBadRequest || strings.Contains(body, "server.") || !strings.Contains(body, "want an object") {
		t.Errorf("a UI chat body of the wrong JSON type: %d %s, want 400 naming the JSON type", code, body)
	}

	const key = "mcp-agree-key"
	url, _ := mcpHTTP(t, bin, key, "--plugins", t.TempDir())
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	hdr := []string{"Authorization", "bearer " + key, "Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	if code, body := do("POST", url, init, hdr...); code != http.StatusOK {
		t.Fatalf("mcp --http initialize, \"bearer\" in lower case: %d %s", code, body)
	}
	if code, body := do("POST", url, init, append(hdr, "Origin", "https://evil.example")...); code != http.StatusForbidden {
		t.Errorf("mcp --http, a request from another origin: %d %s, want 403", code, body)
	}
	// A page of another site whose name was rebound to the loopback
	// address reaches it with its own name in Host: refused.
	if code, body := do("POST", url, init, append(hdr, "Host", "evil.example")...); code != http.StatusForbidden {
		t.Errorf("mcp --http on loopback, a request with another Host (DNS rebinding): %d %s, want 403", code, body)
	}
}

// TestServeListsDamagedSessions: one session whose ledger is damaged in
// the middle (a line that does not decode, intact records after it) shows
// as damaged in GET /v1/sessions and GET /v1/usage, which go on with the
// others; its own routes answer 503 naming the damage.
func TestServeListsDamagedSessions(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	dir := t.TempDir()
	s := startServe(t, "serve", bin, writeServeConfig(t, "file:"+dir, model.URL(), ""))
	for _, id := range []string{"good", "bad"} {
		s.must("POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"hello"}`, http.StatusOK, nil)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*bad*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("the bad session's file: %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	if err := os.WriteFile(files[0], []byte(first+"\n{not json\n"+rest), 0o644); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Sessions []struct {
			ID     string `json:"id"`
			Status struct {
				State, Reason string
			} `json:"status"`
		} `json:"sessions"`
	}
	s.must("GET", "/v1/sessions", "", http.StatusOK, &list)
	states := map[string]string{}
	for _, it := range list.Sessions {
		states[it.ID] = it.Status.State
		if it.ID == "bad" && !strings.Contains(it.Status.Reason, ":2:") {
			t.Errorf("the damaged session's reason does not name the line: %q", it.Status.Reason)
		}
	}
	if states["good"] != "completed" || states["bad"] != "damaged" {
		t.Errorf("GET /v1/sessions: %v, want good completed and bad damaged", states)
	}
	var usage struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
		} `json:"sessions"`
		Damaged []struct {
			SessionID string `json:"session_id"`
			Reason    string `json:"reason"`
		} `json:"damaged"`
	}
	s.must("GET", "/v1/usage", "", http.StatusOK, &usage)
	if len(usage.Damaged) != 1 || usage.Damaged[0].SessionID != "bad" || len(usage.Sessions) != 1 || usage.Sessions[0].SessionID != "good" {
		t.Errorf("GET /v1/usage: sessions %+v, damaged %+v", usage.Sessions, usage.Damaged)
	}
	if code, body, _ := s.do("GET", "/v1/sessions/bad", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, ":2:") {
		t.Errorf("GET /v1/sessions/bad: %d %s, want 503 naming the line", code, body)
	}
}

// vmHWM returns a process's peak resident memory, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	t.Skip("no VmHWM")
	return 0
}

// TestServeUploadsOneAtATime: a module larger than max_plugin_bytes is
// refused on its Content-Length, before a byte of it is read; a tenant's
// uploads are read one at a time (429 for another meanwhile), so six
// simultaneous 60 MiB uploads do not take the server's memory up by six
// modules' worth.
func TestServeUploadsOneAtATime(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	s := startServe(t, "serve", bin, writeServeConfig(t, "file:"+t.TempDir(), model.URL(), "body_timeout: 3s\nplugins_dir: "+t.TempDir()+"\n"))
	addr := strings.TrimPrefix(s.url, "http://")
	auth := "Authorization: Bearer " + serveKey + "\r\n"

	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /v1/plugins/huge HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n", auth, 200<<20)
	// None of the body is sent: a 413 is an answer to the announcement.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 200 MiB upload announced, not sent: %v %v after %v, want 413 at once", res, err, time.Since(start))
	}

	// A slow upload holds the tenant's slot; another meanwhile is 429.
	slow := trickle(t, addr, "PUT /v1/plugins/slow HTTP/1.1\r\nHost: x\r\n"+auth, 1000, 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if code, body, _ := s.do("PUT", "/v1/plugins/other", "junk"); code != http.StatusTooManyRequests {
		t.Errorf("an upload while another is read: %d %s, want 429", code, body)
	}
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if res, err := http.ReadResponse(bufio.NewReader(slow), nil); err != nil || res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("the slow upload: %v %v, want 408", res, err)
	}
	if code, body, _ := s.do("PUT", "/v1/plugins/other", "junk"); code != http.StatusUnprocessableEntity {
		t.Errorf("an upload once the slot is free: %d %s, want 422 (read, then refused as no module)", code, body)
	}

	// Six at once, 60 MiB each.
	before := vmHWM(t, s.pid())
	big := strings.Repeat("x", 60<<20)
	codes := make(chan int, 6)
	for i := range 6 {
		go func() {
			code, _, _ := s.do("PUT", fmt.Sprintf("/v1/plugins/big%d", i), big)
			codes <- code
		}()
	}
	seen := map[int]int{}
	for range 6 {
		seen[<-codes]++
	}
	grew := vmHWM(t, s.pid()) - before
	t.Logf("six simultaneous 60 MiB uploads: answers %v; peak memory grew %d MiB", seen, grew>>20)
	if seen[http.StatusTooManyRequests] == 0 {
		t.Errorf("answers %v: want the uploads that came while another was read refused (429)", seen)
	}
	if grew > 300<<20 {
		t.Errorf("peak memory grew %d MiB for six 60 MiB uploads, want one at a time", grew>>20)
	}
}

// TestServeBoundsStreams: event streams are bounded per API key, per
// tenant and over the process (429 past a bound, and a stream closed frees
// its slot), and a session's or the feed's stream closes after
// stream_max_age.
func TestServeBoundsStreams(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	keys := []string{"ak_streams_a1", "ak_streams_a2", "ak_streams_a3", "ak_streams_b1"}
	cfg := fmt.Sprintf(`storage: file:%s
max_streams: 6
stream_max_age: 2s
model:
  base_url: %s
tenants:
  acme:
    keys: [%q, %q, %q]
    models: [fake/echo]
    rate_limit: {streams: 4, streams_per_key: 2}
  beta:
    keys: [%q]
    models: [fake/echo]
    rate_limit: {streams: 4, streams_per_key: 4}
`, t.TempDir(), model.URL(), server.HashKey(keys[0]), server.HashKey(keys[1]), server.HashKey(keys[2]), server.HashKey(keys[3]))
	path := filepath.Join(t.TempDir(), "agentic.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "serve", bin, path)
	open := func(key, route string) (int, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", s.url+route, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("GET %s: %v", route, err)
		}
		if res.StatusCode != http.StatusOK {
			io.ReadAll(res.Body)
			res.Body.Close()
		}
		return res.StatusCode, func() { cancel(); res.Body.Close() }
	}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	expect := func(key string, want int, why string) func() {
		t.Helper()
		code, done := open(key, "/v1/feed")
		if code != want {
			t.Errorf("%s: %d, want %d", why, code, want)
		}
		closers = append(closers, done)
		return done
	}
	first := expect(keys[0], 200, "a1's first stream")
	expect(keys[0], 200, "a1's second stream")
	expect(keys[0], 429, "a1's third stream (streams_per_key: 2)")
	expect(keys[1], 200, "a2's first stream")
	expect(keys[1], 200, "a2's second stream")
	expect(keys[2], 429, "a3's first stream (the tenant's streams: 4)")
	expect(keys[3], 200, "beta's first stream")
	expect(keys[3], 200, "beta's second stream")
	expect(keys[3], 429, "beta's third stream (max_streams: 6)")
	first()
	// The slot comes back once the server sees the stream closed.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, done := open(keys[2], "/v1/feed")
		if code == 200 {
			closers = append(closers, done)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's slot did not come back: %d", code)
		}
	}
	for _, c := range closers {
		c()
	}
	closers = nil

	// A session's stream ends after stream_max_age.
	s.key = keys[0]
	s.must("POST", "/v1/sessions/aged/messages?wait=true", `{"text":"hi"}`, http.StatusOK, nil)
	start := time.Now()
	code, done := open(keys[0], "/v1/sessions/aged/events")
	defer done()
	if code != 200 {
		t.Fatalf("the session's stream: %d", code)
	}
	ch := s.events("aged")
	for range ch {
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the session's stream lasted %v, want about stream_max_age (2s)", took)
	}
}

// TestServeBudgetTwoHosts: 50 runs at once through two serve processes on
// one Redis, each model call billing $0.40, under a $1.00 daily budget: the
// tenant's spend, summed from every ledger, stays within the budget and
// one call's worth.
func TestServeBudgetTwoHosts(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	model := costingModel(t, 0.4, fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1})
	config := writeServeConfig(t, rds.URL(), model.URL(), "    budget_usd_per_day: 1.0\n")
	hosts := []*serveProc{startServe(t, "A", bin, config, "--set", "host_id=host-a"), startServe(t, "B", bin, config, "--set", "host_id=host-b")}
	var wg sync.WaitGroup
	codes := make([]int, 50)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = hosts[i%2].do("POST", fmt.Sprintf("/v1/sessions/b%d/messages?wait=true", i), `{"text":"`+words("w", 20)+`"}`)
		})
	}
	wg.Wait()
	store := tenantLedger(t, rds.URL())
	total := 0.0
	for i := range codes {
		evs, err := store.Load(context.Background(), fmt.Sprintf("b%d", i))
		if err != nil {
			t.Fatal(err)
		}
		total += ledger.UsageOf(evs).Cost
	}
	t.Logf("answers %v; the ledgers bill $%.2f", codes, total)
	if total > 1.0+0.4+1e-9 {
		t.Errorf("50 runs at once on two hosts spent $%.2f of a $1.00 budget, want at most $1.40", total)
	}
	for _, h := range hosts {
		var usage struct {
			Budget struct {
				SpentToday float64 `json:"spent_today"`
			} `json:"budget"`
		}
		h.must("GET", "/v1/usage", "", http.StatusOK, &usage)
		if d := usage.Budget.SpentToday - total; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s says $%.4f spent today, the ledgers $%.4f", h.name, usage.Budget.SpentToday, total)
		}
	}
}

// TestServeLimitsHoldOnEveryRoute walks every route the server registers
// (server.Server.Routes) against the binary, as the limits table in
// docs/operations.md has them: a body sent one byte every 200ms on a route
// that takes one is answered 408 within body_timeout and its connection
// closed (a body that arrives in time is read as ever), every stream route
// refuses a stream past streams_per_key with 429, and an idle kept-alive
// connection is closed after idle_timeout.
func TestServeLimitsHoldOnEveryRoute(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	lister, err := server.New(server.Options{Storage: memory.New(), Model: hosttest.NewModel(), Config: server.Config{
		Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey(serveKey)}}, Models: []string{"fake/echo"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	routes := lister.Routes()
	lister.Close(context.Background())
	if len(routes) < 15 {
		t.Fatalf("Routes() = %v: too few", routes)
	}
	s := startServe(t, "serve", bin, writeServeConfig(t, "file:"+t.TempDir(), model.URL(),
		"    rate_limit: {streams_per_key: 2}\nbody_timeout: 1s\nidle_timeout: 1s\nplugins_dir: "+t.TempDir()+"\n"))
	s.must("POST", "/v1/sessions/walk/messages?wait=true", `{"text":"hi"}`, http.StatusOK, nil)
	addr := strings.TrimPrefix(s.url, "http://")
	auth := "Authorization: Bearer " + serveKey + "\r\n"
	path := func(pattern string) string {
		p := strings.NewReplacer("{id}", "walk", "{name}", "walk").Replace(pattern)
		return p
	}
	streams := 0
	for _, route := range routes {
		method, pattern, _ := strings.Cut(route, " ")
		p := path(pattern)
		t.Run(route, func(t *testing.T) {
			if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
				start := time.Now()
				c := trickle(t, addr, method+" "+p+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+auth, 1000, 200*time.Millisecond)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("a body sent one byte every 200ms: no answer after %v: %v", time.Since(start), err)
				}
				body, _ := io.ReadAll(res.Body)
				if took := time.Since(start); took > 4*time.Second {
					t.Errorf("answered %d after %v, past body_timeout (1s)", res.StatusCode, took)
				}
				if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_timeout") {
					t.Errorf("a trickled body answered %d %s, want 408 naming body_timeout", res.StatusCode, body)
				}
				if err := closedAfter(c); err != nil {
					t.Errorf("the connection is still open after the 408: %v", err)
				}
				return
			}
			if method != http.MethodGet {
				return
			}
			// A route whose answer is an event stream takes at most
			// streams_per_key of them.
			var open []func()
			defer func() {
				for _, c := range open {
					c()
				}
			}()
			for i := range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", s.url+p, nil)
				req.Header.Set("Authorization", "Bearer "+serveKey)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				open = append(open, func() { cancel(); res.Body.Close() })
				isStream := strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream")
				switch {
				case i == 0 && !isStream:
					return // not a stream route
				case i < 2 && res.StatusCode != http.StatusOK:
					t.Fatalf("stream %d: %d", i+1, res.StatusCode)
				case i == 2 && res.StatusCode != http.StatusTooManyRequests:
					t.Errorf("a third stream of one key (streams_per_key: 2): %d, want 429", res.StatusCode)
				}
			}
			streams++
		})
	}
	if streams < 2 {
		t.Errorf("%d stream routes held streams, want the session's events and the feed at least", streams)
	}
	t.Run("a body in time", func(t *testing.T) {
		s.must("POST", "/v1/sessions/intime/messages?wait=true", `{"text":"hello"}`, http.StatusOK, nil)
	})
	t.Run("idle", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(res.Body)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("a connection idle past idle_timeout (1s): %v, want it closed", err)
		}
	})
}

// TestServePluginBudgetTwoHosts: plugin_fuel_per_day counts over every
// host: two serve processes on one Redis, a budget of 1 fuel; a plugin
// call through host A crosses it, and the next plugin call, through host
// B, is refused with plugin_budget_exceeded (the tool did not run).
func TestServePluginBudgetTwoHosts(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "plugins", "acme"), 0o755); err != nil {
		t.Fatal(err)
	}
	wasm := plugintest.GoPlugin(t, "../../examples/plugins/get_account")
	if err := os.WriteFile(filepath.Join(dir, "plugins", "acme", "get_account.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "agentic.yaml")
	cfg := fmt.Sprintf(`storage: %s
plugins_dir: %s
plugin_cache_dir: %s
model:
  base_url: %s
tenants:
  acme:
    keys: [%q]
    models: [fake/echo]
    plugin_fuel_per_day: 1
`, rds.URL(), filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "fuel-two-hosts"), model.URL(), server.HashKey(serveKey))
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := startServe(t, "A", bin, config, "--set", "host_id=host-a"), startServe(t, "B", bin, config, "--set", "host_id=host-b")
	waitPlugins(a, 1)
	waitPlugins(b, 1)
	type transcript struct {
		Items []struct {
			ToolCalls []struct {
				Status, Output string
				Fuel           int64
			} `json:"tool_calls"`
		}
	}
	call := func(h *serveProc, session string) (status, output string, fuel int64) {
		t.Helper()
		h.must("POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"get_account account_id=42"}`, http.StatusOK, nil)
		var tr transcript
		h.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, &tr)
		for _, it := range tr.Items {
			for _, c := range it.ToolCalls {
				return c.Status, c.Output, c.Fuel
			}
		}
		t.Fatalf("%s: no tool call", session)
		return
	}
	if status, _, fuel := call(a, "s1"); status != "done" || fuel <= 1 {
		t.Fatalf("the call through host A: %s with %d fuel, want done with more than the budget", status, fuel)
	}
	if status, output, fuel := call(b, "s2"); status != "error" || fuel != 0 || !strings.Contains(output, "plugin_budget_exceeded") {
		t.Errorf("the call through host B after A spent the budget: %s, %d fuel, %q; want it refused", status, fuel, output)
	}
}

// costingModel starts the fake model with opts, its default replies each
// billing cost.
func costingModel(t *testing.T, cost float64, opts fakemodel.Options) *fakemodel.Server {
	t.Helper()
	opts.Respond = func(req fakemodel.Request) fakemodel.Reply {
		r := fakemodel.DefaultReply(req)
		r.Usage = &fakemodel.Usage{PromptTokens: 10, CompletionTokens: 10, Cost: cost}
		return r
	}
	model, err := fakemodel.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	return model
}

// TestServeBudgetAskTwoHosts: budget_ask over two serve processes on one
// Redis. A run through host A crosses the $1.00 budget in its first pass
// (a call bills $1.20) and parks on a budget_exceeded request; both hosts'
// inboxes list it; host B approves it, and B goes on with the run, its
// next pass on the grant, to the answer.
func TestServeBudgetAskTwoHosts(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	model := costingModel(t, 1.2, fakemodel.Options{})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "plugins", "acme"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plugins", "acme", "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := writeServeConfig(t, rds.URL(), model.URL(), fmt.Sprintf(`    budget_usd_per_day: 1.0
    budget_ask:
      raise_usd: 2
plugins_dir: %s
plugin_cache_dir: %s
`, filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "budget-ask-two-hosts")))
	a, b := startServe(t, "A", bin, config, "--set", "host_id=host-a"), startServe(t, "B", bin, config, "--set", "host_id=host-b")
	waitPlugins(a, 1)
	waitPlugins(b, 1)
	type approvals struct {
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
			Kind       string `json:"kind"`
			CallID     string `json:"call_id"`
		} `json:"approvals"`
	}
	var parked struct {
		Status string `json:"status"`
		approvals
	}
	a.must("POST", "/v1/sessions/s/messages?wait=true", `{"text":"get_account account_id=42"}`, http.StatusOK, &parked)
	if parked.Status != "approval_required" || len(parked.Approvals) != 1 || parked.Approvals[0].Kind != "budget_exceeded" || parked.Approvals[0].CallID != "" {
		t.Fatalf("the run past the budget: %+v, want it parked on a budget_exceeded request", parked)
	}
	id := parked.Approvals[0].ApprovalID
	for _, h := range []*serveProc{a, b} {
		var inbox approvals
		h.must("GET", "/v1/approvals", "", http.StatusOK, &inbox)
		if len(inbox.Approvals) != 1 || inbox.Approvals[0].ApprovalID != id {
			t.Fatalf("%s's inbox %+v, want the request", h.name, inbox)
		}
	}
	b.must("POST", "/v1/approvals/"+id, `{"approve":true,"by":"ops"}`, http.StatusOK, nil)
	deadline := time.Now().Add(time.Minute)
	for {
		var sess struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		a.must("GET", "/v1/sessions/s", "", http.StatusOK, &sess)
		if sess.Status.State == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved run is %s after a minute", sess.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := model.RequestCount(); n != 2 {
		t.Errorf("the model was called %d times, want twice (the pass that crossed, the pass on the grant)", n)
	}
}

// TestSlowHeaders: a client that starts a request and never ends its
// headers has its connection closed (after 10 s) by serve and by mcp
// --http, rather than held open for good.
func TestSlowHeaders(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	s := startServe(t, "serve", bin, writeServeConfig(t, "file:"+t.TempDir(), model.URL(), ""))
	mcpURL, _ := mcpHTTP(t, bin, "slow-headers-key", "--plugins", t.TempDir())
	for name, addr := range map[string]string{
		"serve":      strings.TrimPrefix(s.url, "http://"),
		"mcp --http": strings.TrimSuffix(strings.TrimPrefix(mcpURL, "http://"), "/mcp"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Half: ", addr)
			c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard: the bound is 10 s
			if n, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("a request whose headers never end: read %d bytes, %v after %v; want the connection closed", n, err, time.Since(start))
			}
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}
