package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// memJournal is a host.Journal in memory: what a run's ledger would hold
// of a call's tool-journal events.
type memJournal struct {
	mu      sync.Mutex
	source  string
	entries []ledger.JournalEntry
	writes  int
	cuts    []int             // the entries after each write
	failAt  int               // the write (1-based) that fails; 0: none
	events  map[string][]byte // the events posted
}

func (j *memJournal) Event(_ context.Context, key string) ([]byte, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v, ok := j.events[key]
	return v, ok, nil
}

func (j *memJournal) Recorded() (string, []ledger.JournalEntry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.source, slices.Clone(j.entries)
}

func (j *memJournal) Record(_ context.Context, source string, entries []ledger.JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.writes++
	if j.writes == j.failAt {
		return errors.New("the disk is full")
	}
	if j.source != "" && j.source != source {
		return fmt.Errorf("a journal of %s written by %s", j.source, source)
	}
	j.source = source
	for _, e := range entries {
		e.Answer = slices.Clone(e.Answer) // the caller's buffers are its own
		j.entries = append(j.entries, e)
	}
	j.cuts = append(j.cuts, len(j.entries))
	return nil
}

// hostCalls returns the entries of host calls: not the streams of the
// clocks and random numbers.
func hostCalls(entries []ledger.JournalEntry) []ledger.JournalEntry {
	var out []ledger.JournalEntry
	for _, e := range entries {
		switch e.Op {
		case ledger.JournalWalltime, ledger.JournalNanotime, ledger.JournalRandom:
		default:
			out = append(out, e)
		}
	}
	return out
}

// prefixAt returns j's entries up to the place where op's nth entry (from
// 1) ends a write.
func (j *memJournal) prefixAt(t *testing.T, op string, nth int) []ledger.JournalEntry {
	t.Helper()
	seen := 0
	for _, cut := range j.cuts {
		if e := j.entries[cut-1]; e.Op == op {
			if seen++; seen == nth {
				return slices.Clone(j.entries[:cut])
			}
		}
	}
	t.Fatalf("no write ends with %s number %d", op, nth)
	return nil
}

// stepServer counts the steps http_steps POSTs, with the Idempotency-Key
// of each arrival.
type stepServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[int][]string // step -> the keys it arrived with, in order
}

func newStepServer(t testing.TB) *stepServer {
	s := &stepServer{keys: map[int][]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Step int `json:"step"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || r.Method != http.MethodPost {
			http.Error(w, "want a POST of {\"step\": i}", http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		s.keys[body.Step] = append(s.keys[body.Step], key)
		s.mu.Unlock()
		fmt.Fprintf(w, `{"done":%d}`, body.Step)
	}))
	t.Cleanup(s.Close)
	return s
}

// arrivals returns how many times each step arrived, and with which keys.
func (s *stepServer) arrivals() map[int][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int][]string{}
	for k, v := range s.keys {
		out[k] = slices.Clone(v)
	}
	return out
}

// seed sets what the server had received before a replay.
func (s *stepServer) seed(keys map[int][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func httpStepsWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/http_steps")
}

// loadHTTPSteps loads http_steps for tenant acme, allowed to reach srv.
func loadHTTPSteps(t *testing.T, srv *httptest.Server) *plugins.Module {
	t.Helper()
	return loadHTTPStepsLimits(t, &stepServer{Server: srv}, 64)
}

// loadHTTPStepsLimits is loadHTTPSteps, up to maxRequests a call.
func loadHTTPStepsLimits(t testing.TB, srv *stepServer, maxRequests int) *plugins.Module {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	rt := plugintest.Runtime(t, plugins.Options{})
	return plugintest.Load(t, rt, plugins.Source{Name: "http_steps", Wasm: httpStepsWasm(t), Tenant: "acme",
		Limits: plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, MaxHTTPRequests: maxRequests}})
}

func moduleTool(t *testing.T, m *plugins.Module, name string) host.Tool {
	t.Helper()
	for _, tool := range m.Tools() {
		if tool.Spec().Name == name {
			return tool
		}
	}
	t.Fatalf("the module has no tool %s", name)
	return nil
}

// stepsCall is a call of http_steps (or tool) of n steps to srv, with j.
func stepsCall(srv *httptest.Server, tool string, n int, j host.Journal) host.ToolCall {
	return host.ToolCall{ID: "call_1", SessionID: "sess_1", Name: tool,
		Input: json.RawMessage(fmt.Sprintf(`{"url":%q,"steps":%d}`, srv.URL+"/step", n)), Journal: j}
}

// TestJournalReplayAtEveryBoundary runs http_steps of five steps with a
// journal, then replays it from every durable prefix of that journal — as a
// resumed run finds it after a crash before or after each journal write —
// with the server having received what it had by then (for a prefix that
// ends with a request's send: that request, or not). Every step must reach
// the server exactly once, except the request in flight at the crash,
// which may reach it twice, with the same Idempotency-Key; the replayed call
// returns what the first would have.
func TestJournalReplayAtEveryBoundary(t *testing.T) {
	srv := newStepServer(t)
	m := loadHTTPSteps(t, srv.Server)
	tool := moduleTool(t, m, "http_steps")
	const n = 5

	full := &memJournal{}
	res, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", n, full))
	if err != nil {
		t.Fatal(err)
	}
	want := res.Output
	calls := hostCalls(full.entries)
	if len(calls) != 2*n || full.source != m.Hash() {
		t.Fatalf("the journal holds %d host calls of %s, want %d of %s: %+v", len(calls), full.source, 2*n, m.Hash(), full.entries)
	}
	if full.writes != 2*n {
		t.Errorf("%d journal writes for %d requests, want one before each request and one after", full.writes, n)
	}
	keys := map[int]string{}
	for step, ks := range srv.arrivals() {
		if len(ks) != 1 || ks[0] == "" || !strings.HasPrefix(ks[0], "agentic-") {
			t.Fatalf("step %d arrived with keys %q, want one agentic- key", step, ks)
		}
		keys[step] = ks[0]
	}
	if len(keys) != n {
		t.Fatalf("the server got steps %v, want 1..%d", keys, n)
	}
	for i := range n {
		send, answer := calls[2*i], calls[2*i+1]
		if send.Op != ledger.JournalHTTPSend || answer.Op != ledger.JournalHTTP || send.Key != keys[i+1] {
			t.Fatalf("host calls %d, %d: %s (key %s), %s; want http-send with the key step %d arrived with (%s), then http",
				2*i, 2*i+1, send.Op, send.Key, answer.Op, i+1, keys[i+1])
		}
	}

	for k := 0; k <= len(full.cuts); k++ {
		prefix := []ledger.JournalEntry{}
		if k > 0 {
			prefix = full.entries[:full.cuts[k-1]]
		}
		done, inFlight := 0, false
		for _, e := range hostCalls(prefix) {
			inFlight = e.Op == ledger.JournalHTTPSend // the prefix ends with a request's send
			if e.Op == ledger.JournalHTTP {
				done++
			}
		}
		for _, reached := range []bool{false, true} {
			if reached && !inFlight {
				continue
			}
			name := fmt.Sprintf("after write %d", k)
			if inFlight {
				name += map[bool]string{false: ", before its request left", true: ", its request arrived"}[reached]
			}
			t.Run(name, func(t *testing.T) {
				// What the server had when the host died.
				had := map[int][]string{}
				for i := 1; i <= done; i++ {
					had[i] = []string{keys[i]}
				}
				flight := done + 1
				if reached {
					had[flight] = []string{keys[flight]}
				}
				srv.seed(had)
				j := &memJournal{source: full.source, entries: slices.Clone(prefix)}
				res, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", n, j))
				if err != nil {
					t.Fatal(err)
				}
				if res.Output != want {
					t.Errorf("the replayed call returned\n%s\nwant\n%s", res.Output, want)
				}
				got := srv.arrivals()
				for i := 1; i <= n; i++ {
					times := 1
					if reached && i == flight {
						times = 2
					}
					if len(got[i]) != times {
						t.Errorf("step %d reached the server %d times, want %d", i, len(got[i]), times)
					}
					for _, key := range got[i] {
						if key != keys[i] {
							t.Errorf("step %d arrived with key %s, the first time with %s", i, key, keys[i])
						}
					}
				}
				after := hostCalls(j.entries)
				if len(after) != 2*n || !slices.EqualFunc(after, calls, func(a, b ledger.JournalEntry) bool {
					return a.Op == b.Op && a.Request == b.Request && a.Key == b.Key
				}) {
					t.Errorf("the journal after the replay holds %d host calls, not those of a call that ran once", len(after))
				}
			})
		}
	}
}

// TestJournalReplayRefusals: a journal made by another module is not
// replayed; a call that asks other than its journal diverges; a tool that
// declares at_most_once does not send again a request in flight at the
// crash; a journal that cannot be written stops the call before its request
// leaves. Each fails typed, and nothing reaches the server that should not.
func TestJournalReplayRefusals(t *testing.T) {
	srv := newStepServer(t)
	m := loadHTTPSteps(t, srv.Server)
	tool := moduleTool(t, m, "http_steps")
	full := &memJournal{}
	if _, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 3, full)); err != nil {
		t.Fatal(err)
	}

	t.Run("another module", func(t *testing.T) {
		srv.seed(map[int][]string{})
		j := &memJournal{source: "sha256:" + strings.Repeat("0", 64), entries: full.prefixAt(t, ledger.JournalHTTPSend, 2)}
		_, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 3, j))
		if !errors.Is(err, plugins.ErrJournalModule) {
			t.Fatalf("err = %v, want ErrJournalModule", err)
		}
		if got := srv.arrivals(); len(got) != 0 {
			t.Errorf("the refused replay reached the server: %v", got)
		}
	})

	t.Run("diverged", func(t *testing.T) {
		srv.seed(map[int][]string{})
		j := &memJournal{source: full.source, entries: full.prefixAt(t, ledger.JournalHTTP, 2)}
		call := stepsCall(srv.Server, "http_steps", 3, j)
		call.Input = json.RawMessage(fmt.Sprintf(`{"url":%q,"steps":3}`, srv.URL+"/other"))
		_, err := tool.Call(context.Background(), call)
		if !errors.Is(err, plugins.ErrJournalDiverged) || !strings.Contains(err.Error(), "host call 1") {
			t.Fatalf("err = %v, want ErrJournalDiverged at host call 1", err)
		}
		if got := srv.arrivals(); len(got) != 0 {
			t.Errorf("the diverged replay reached the server: %v", got)
		}
	})

	t.Run("fewer calls than journaled", func(t *testing.T) {
		srv.seed(map[int][]string{})
		j := &memJournal{source: full.source, entries: full.prefixAt(t, ledger.JournalHTTP, 2)}
		_, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 1, j))
		if !errors.Is(err, plugins.ErrJournalDiverged) || !strings.Contains(err.Error(), "ended after 2 host calls") {
			t.Fatalf("err = %v, want ErrJournalDiverged: ended after 2 host calls", err)
		}
	})

	t.Run("at most once", func(t *testing.T) {
		once := moduleTool(t, m, "http_steps_once")
		first := &memJournal{}
		srv.seed(map[int][]string{})
		if _, err := once.Call(context.Background(), stepsCall(srv.Server, "http_steps_once", 3, first)); err != nil {
			t.Fatal(err)
		}
		// The host died with step 2 sent (journaled) and not answered.
		calls := hostCalls(first.entries)
		srv.seed(map[int][]string{1: {calls[0].Key}, 2: {calls[2].Key}})
		j := &memJournal{source: first.source, entries: first.prefixAt(t, ledger.JournalHTTPSend, 2)}
		_, err := once.Call(context.Background(), stepsCall(srv.Server, "http_steps_once", 3, j))
		if !errors.Is(err, plugins.ErrOutcomeUnknown) || !strings.Contains(err.Error(), calls[2].Key) ||
			!strings.Contains(err.Error(), "/step") {
			t.Fatalf("err = %v, want ErrOutcomeUnknown naming the request and its key", err)
		}
		if got := srv.arrivals(); len(got[2]) != 1 || len(got[3]) != 0 {
			t.Errorf("after the refusal the server has %v, want step 2 once and no step 3", got)
		}
	})

	t.Run("journal write fails", func(t *testing.T) {
		srv.seed(map[int][]string{})
		j := &memJournal{failAt: 3} // step 2's send
		_, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 3, j))
		if !errors.Is(err, plugins.ErrJournalWrite) || !strings.Contains(err.Error(), "the disk is full") {
			t.Fatalf("err = %v, want ErrJournalWrite saying why", err)
		}
		if got := srv.arrivals(); len(got) != 1 || len(got[1]) != 1 {
			t.Errorf("the server has %v, want step 1 only: step 2 was not journaled, so it must not leave", got)
		}
	})
}

// TestIdempotencyKeyWithoutJournal: a call that keeps no journal (outside
// a run) still sends every request with a key of its call and place, the
// one pdk.IdempotencyKey announced.
func TestIdempotencyKeyWithoutJournal(t *testing.T) {
	srv := newStepServer(t)
	m := loadHTTPSteps(t, srv.Server)
	tool := moduleTool(t, m, "http_steps")
	res, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 2, nil))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Steps []struct {
			Step int    `json:"step"`
			Key  string `json:"key"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatal(err)
	}
	got := srv.arrivals()
	if len(out.Steps) != 2 {
		t.Fatalf("output %s", res.Output)
	}
	for _, s := range out.Steps {
		if len(got[s.Step]) != 1 || got[s.Step][0] != s.Key || !strings.HasPrefix(s.Key, "agentic-") {
			t.Errorf("step %d: announced key %q, arrived with %q", s.Step, s.Key, got[s.Step])
		}
	}
	if out.Steps[0].Key == out.Steps[1].Key {
		t.Errorf("two requests share the key %s", out.Steps[0].Key)
	}
	// The same call again (the same session and call id): the same keys.
	srv.seed(map[int][]string{})
	if _, err := tool.Call(context.Background(), stepsCall(srv.Server, "http_steps", 2, nil)); err != nil {
		t.Fatal(err)
	}
	for step, keys := range srv.arrivals() {
		if keys[0] != got[step][0] {
			t.Errorf("step %d: key %s the second time, %s the first", step, keys[0], got[step][0])
		}
	}
}

// stampedReplay calls the tool "stamped" of wasm (three steps POSTed to a
// test server, each with the time and a random nonce) with a journal, then
// replays the call from the journal cut after its second request. It
// returns the bodies of both calls' answers, what the server got of the
// replay, by step, and the bytes the first call's journal kept of each
// stream (clock, random).
func stampedReplay(t *testing.T, name string, wasm []byte) (first, again []string, replayed map[int][]string, streams map[string]int) {
	t.Helper()
	var mu sync.Mutex
	bodies := map[int][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body struct{ Step int }
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		bodies[body.Step] = append(bodies[body.Step], string(b))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	rt := plugintest.Runtime(t, plugins.Options{})
	m := plugintest.Load(t, rt, plugins.Source{Name: name, Wasm: wasm, Tenant: "acme",
		Limits: plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}})
	tool := moduleTool(t, m, "stamped")
	if !host.IsJournaled(tool) {
		t.Fatalf("%s's stamped is not journaled", name)
	}
	call := func(j host.Journal) []string {
		t.Helper()
		res, err := tool.Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s1", Name: "stamped",
			Input: json.RawMessage(fmt.Sprintf(`{"url":%q,"steps":3}`, srv.URL)), Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		if err := json.Unmarshal([]byte(res.Output), &out); err != nil || len(out) != 3 {
			t.Fatalf("answer %s: %v", res.Output, err)
		}
		return out
	}
	full := &memJournal{}
	first = call(full)
	streams = map[string]int{}
	for _, e := range full.entries {
		streams[e.Op] += len(e.Answer)
	}
	mu.Lock()
	bodies = map[int][]string{}
	mu.Unlock()
	again = call(&memJournal{source: full.source, entries: full.prefixAt(t, ledger.JournalHTTP, 2)})
	mu.Lock()
	defer mu.Unlock()
	return first, again, bodies, streams
}

// TestJournalReplaysClocksAndRandom: a Go tool replayed from its journal
// after its second request sends only the third; its first two bodies are
// those of the first run (the same times and nonces, read again from the
// journal), the third is new (another time and nonce, read live).
func TestJournalReplaysClocksAndRandom(t *testing.T) {
	a, b, got, streams := stampedReplay(t, "stamped", plugintest.GoPlugin(t, "testdata/stamped"))
	if streams[ledger.JournalWalltime] < 3*8 || streams[ledger.JournalRandom] < 3*16 {
		t.Fatalf("the journal kept %v bytes of the streams, want at least 3 wall clock readings and 48 random bytes", streams)
	}
	if len(got[1]) != 0 || len(got[2]) != 0 || len(got[3]) != 1 {
		t.Fatalf("the server got %v, want step 3 only", got)
	}
	if a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Errorf("the replay's output\n%q\nwant the first two steps of\n%q\n(the third live: another time and nonce)", b, a)
	}
}

// TestJournalReplaysJavaScript: a TypeScript tool's call is durable as a
// Go tool's is. Replayed from its journal after its second request, it
// sends only the third, and its first two bodies are those of the first
// run: the same Date.now() and the same Math.random(), both drawn anew
// at every call unless the journal answers them. (Math.random's numbers
// follow from the call's seed, one journaled draw: the third's nonce may
// be the first run's too.)
func TestJournalReplaysJavaScript(t *testing.T) {
	a, b, got, streams := stampedReplay(t, "hostile_js", jsHostileWasm(t))
	if streams[ledger.JournalWalltime] < 3*8 || streams[ledger.JournalRandom] < 8 {
		t.Fatalf("the journal kept %v bytes of the streams, want 3 wall clock readings and the call's seed", streams)
	}
	if len(got[1]) != 0 || len(got[2]) != 0 || len(got[3]) != 1 {
		t.Fatalf("the server got %v, want step 3 only", got)
	}
	if a[0] != b[0] || a[1] != b[1] {
		t.Errorf("the replay's output\n%q\nwant the first two steps of\n%q", b, a)
	}
}

// TestJournaledCallLogsPastTheJournal: a journaled call may log far more
// lines than the journal holds entries (the hostile plugin's flood of
// 6,000): logs are not journaled, and the call succeeds.
func TestJournaledCallLogsPastTheJournal(t *testing.T) {
	rt := plugintest.Runtime(t, plugins.Options{})
	m := plugintest.Load(t, rt, plugins.Source{Name: "hostile", Wasm: hostileWasm(t)})
	j := &memJournal{}
	_, err := moduleTool(t, m, "log").Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s1", Name: "log",
		Input: json.RawMessage(`{"bytes":6000}`), Journal: j})
	if err != nil {
		t.Fatalf("a call logging 6,000 lines: %v", err)
	}
	if n := len(hostCalls(j.entries)); n != 0 {
		t.Errorf("the journal holds %d host calls, want none (logs are not journaled)", n)
	}
}

// TestMaxHTTPRequests: a call makes at most Limits.MaxHTTPRequests
// requests (default 8): the ninth is refused without reaching the server,
// and the call fails saying why; a limit raised lets the same call through.
func TestMaxHTTPRequests(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	wasm := plugintest.GoPlugin(t, "testdata/stamped")
	rt := plugintest.Runtime(t, plugins.Options{})
	call := func(limits plugins.Limits) error {
		limits.AllowedHosts, limits.AllowPrivateNetwork = []string{u.Host}, true
		m := plugintest.Load(t, rt, plugins.Source{Name: "stamped", Wasm: wasm, Tenant: "acme", Limits: limits})
		_, err := moduleTool(t, m, "stamped").Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s1", Name: "stamped",
			Input: json.RawMessage(fmt.Sprintf(`{"url":%q,"steps":9}`, srv.URL))})
		return err
	}
	if err := call(plugins.Limits{}); err == nil || !strings.Contains(err.Error(), "more than 8 HTTP requests in one call") {
		t.Fatalf("nine requests under the default: %v; want the ninth refused", err)
	}
	if n := asked.Load(); n != 8 {
		t.Errorf("the server was asked %d times, want 8", n)
	}
	asked.Store(0)
	if err := call(plugins.Limits{MaxHTTPRequests: 9}); err != nil || asked.Load() != 9 {
		t.Errorf("with a limit of 9: %v, %d requests", err, asked.Load())
	}
}
