//go:build unix

package plugins_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// Durable plugin calls through SIGKILL: a host process runs a session whose
// model calls http_steps (five POSTs to a counting server) and is killed at
// one boundary of the call — before or after one of its journal writes,
// when a request arrives at the server, right after the server answered
// one — then a second process (on Redis: another host, once the dead one's
// lease lapsed) resumes the run on its own. Every step must reach the
// server exactly once, but the request in flight at the kill, which may
// reach it twice with the same Idempotency-Key; the call's result holds the
// five answers.

// The environment of a child process.
const (
	envDurableChild = "AGENTIC_DURABLE_CHILD"  // "send" (the first process) or "resume"; absent: not a child
	envDurableStore = "AGENTIC_DURABLE_STORE"  // file:DIR or redis:URL
	envDurableModel = "AGENTIC_DURABLE_MODEL"  // the fake model's URL
	envDurableWasm  = "AGENTIC_DURABLE_WASM"   // http_steps.wasm
	envDurableSteps = "AGENTIC_DURABLE_STEPS"  // the counting server's URL
	envDurableKill  = "AGENTIC_DURABLE_KILL"   // before:N or after:N, the Nth journal write of the process
	envDurablePfx   = "AGENTIC_DURABLE_PREFIX" // the Redis store's key prefix
	envDurableNew   = "AGENTIC_DURABLE_NEW"    // "1": load another build of the module (a custom section added)
	envDurableAll   = "AGENTIC_DURABLE_ALL"    // "1": every boundary on every store (make soak), not only on files
	envDurableTool  = "AGENTIC_DURABLE_TOOL"   // the tool the model calls: http_steps (default), wait_event or wait_seconds
	envDurableText  = "AGENTIC_DURABLE_TEXT"   // the message sent, when the tool is not http_steps
	envDurableEvent = "AGENTIC_DURABLE_EVENT"  // post: the event's key (its payload is "paid")
	durableWaiting  = "DURABLE-WAITING"
	durableSession  = "durable"
	durableSteps    = 5
	durableResult   = "DURABLE-RESULT "
	durableKillLine = "DURABLE-KILL "
)

// journalKiller is a tool whose calls' journals SIGKILL the process at one
// write.
type journalKiller struct {
	host.Tool
	mode   string // before or after
	at     int64
	writes *atomic.Int64
}

func (k *journalKiller) Journaled() bool { return true }

func (k *journalKiller) Call(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
	if call.Journal != nil {
		call.Journal = &killingJournal{Journal: call.Journal, k: k}
	}
	return k.Tool.Call(ctx, call)
}

type killingJournal struct {
	host.Journal
	k *journalKiller
}

func (j *killingJournal) Record(ctx context.Context, source string, entries []ledger.JournalEntry) error {
	n := j.k.writes.Add(1)
	if n == j.k.at && j.k.mode == "before" {
		selfKill(fmt.Sprintf("before journal write %d (%s)", n, entries[0].Op))
	}
	err := j.Journal.Record(ctx, source, entries)
	if n == j.k.at && j.k.mode == "after" {
		selfKill(fmt.Sprintf("after journal write %d (%s, err %v)", n, entries[0].Op, err))
	}
	return err
}

func selfKill(why string) {
	fmt.Fprintln(os.Stderr, durableKillLine+why)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestDurableChild is the child process of TestDurableCallSIGKILL; it skips
// unless run as one.
func TestDurableChild(t *testing.T) {
	mode := os.Getenv(envDurableChild)
	if mode == "" {
		t.Skip("the child of TestDurableCallSIGKILL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var store storage.Storage
	var hostID = "host-" + mode
	switch kind, where, _ := strings.Cut(os.Getenv(envDurableStore), ":"); kind {
	case "file":
		s, err := file.Open(where, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		store = s
	case "redis":
		s, err := redis.Open(ctx, where, redis.Options{WatchBlock: 200 * time.Millisecond, Prefix: os.Getenv(envDurablePfx)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		store = s
	default:
		t.Fatalf("%s: %q", envDurableStore, os.Getenv(envDurableStore))
	}
	wasm, err := os.ReadFile(os.Getenv(envDurableWasm))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envDurableNew) == "1" {
		// The same code, another module: a custom section (id 0, named
		// "build", one byte) changes its hash and nothing else.
		wasm = append(wasm, 0, 7, 5, 'b', 'u', 'i', 'l', 'd', 2)
	}
	steps, _ := url.Parse(os.Getenv(envDurableSteps))
	rt := plugintest.Runtime(t, plugins.Options{})
	m := plugintest.Load(t, rt, plugins.Source{Name: "durable", Wasm: wasm, Tenant: "acme",
		Limits: plugins.Limits{AllowedHosts: []string{steps.Host}, AllowPrivateNetwork: true}})
	toolName := os.Getenv(envDurableTool)
	if toolName == "" {
		toolName = "http_steps"
	}
	tool := &journalKiller{Tool: moduleTool(t, m, toolName), writes: new(atomic.Int64)}
	if spec := os.Getenv(envDurableKill); spec != "" {
		how, at, _ := strings.Cut(spec, ":")
		tool.mode = how
		tool.at, _ = strconv.ParseInt(at, 10, 64)
	}
	client, err := provider.New(provider.Config{BaseURL: os.Getenv(envDurableModel), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	resumed := make(chan host.RunResult, 4)
	// A lease of 2s: the resuming host waits it out once; with 300ms, a
	// child stalled that long on a loaded machine (-race, CI beside other
	// packages) lost its lease before the message was appended and failed
	// the send.
	h, err := host.New(host.Options{Storage: store, Model: client, HostID: hostID, LeaseTTL: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Agent: host.Agent{Model: "fake/echo", Tools: []host.Tool{tool},
			ToolApprovals: map[string]host.ApprovalMode{toolName: host.ApproveAlways}},
		AutoResume: &host.AutoResume{Interval: 100 * time.Millisecond, OnResumed: func(_ string, res host.RunResult, _ error) {
			resumed <- res
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	switch mode {
	case "send":
		text := fmt.Sprintf("please http_steps url=%s steps=%d", steps.String()+"/step", durableSteps)
		if toolName != "http_steps" {
			text = os.Getenv(envDurableText)
		}
		res, err := h.Session(durableSession).Send(ctx, text, host.SendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == ledger.RunWaiting {
			fmt.Println(durableWaiting)
			select {} // until killed
		}
	case "post", "watch":
		if mode == "post" {
			if _, err := h.Session(durableSession).PostEvent(ctx, os.Getenv(envDurableEvent), []byte("paid")); err != nil {
				t.Fatal(err)
			}
		}
		for {
			st, err := h.Session(durableSession).Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == host.StateCompleted {
				break
			}
			// Interrupted is a passing state: the first host may have
			// started the resumed run (its timer fired) before it was
			// killed, and this host's auto-resume takes such a run on
			// its next sweep. A run never resumed ends at ctx's deadline.
			switch st.State {
			case host.StateWaiting, host.StateRunning, host.StateInterrupted:
			default:
				t.Fatalf("the session is %s: %s", st.State, st.Reason)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the session is still %s", st.State)
			case <-time.After(20 * time.Millisecond):
			}
		}
	case "resume":
		select {
		case res := <-resumed:
			if res.Status != ledger.RunCompleted {
				t.Fatalf("the resumed run ended %s: %s", res.Status, res.Reason)
			}
		case <-ctx.Done():
			t.Fatal("no run was resumed")
		}
	}
	evs, err := store.Load(ctx, durableSession)
	if err != nil {
		t.Fatal(err)
	}
	var results []ledger.ToolResult
	for _, e := range evs {
		if e.ToolResult != nil {
			results = append(results, *e.ToolResult)
		}
	}
	b, _ := json.Marshal(results)
	fmt.Println(durableResult + string(b))
}

// durableServer counts the steps, and may kill the child at one of them.
type durableServer struct {
	*httptest.Server
	mu       sync.Mutex
	keys     map[int][]string
	killStep int    // the step at which the child dies
	killWhen string // "arrive" (before answering) or "answered"
	child    *os.Process
	exited   chan struct{} // closed when the child has exited
	killed   bool
}

func newDurableServer(t *testing.T) *durableServer {
	s := &durableServer{keys: map[int][]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Step int `json:"step"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &body) != nil {
			http.Error(w, "bad step", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.keys[body.Step] = append(s.keys[body.Step], r.Header.Get("Idempotency-Key"))
		kill := !s.killed && body.Step == s.killStep && s.child != nil
		if kill {
			s.killed = true
		}
		child, when, exited := s.child, s.killWhen, s.exited
		s.mu.Unlock()
		if kill && when == "arrive" {
			// Dead before it is answered.
			_ = child.Signal(syscall.SIGKILL)
			<-exited
		}
		fmt.Fprintf(w, `{"done":%d}`, body.Step)
		if kill && when == "answered" {
			w.(http.Flusher).Flush()
			_ = child.Signal(syscall.SIGKILL)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// durableChild runs one child process to its end.
func durableChild(t *testing.T, srv *durableServer, mode string, env ...string) (stdout, stderr string, killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChild$", "-test.v")
	cmd.Env = append(append(os.Environ(), envDurableChild+"="+mode), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	if mode == "send" {
		srv.mu.Lock()
		srv.child, srv.exited = cmd.Process, exited
		srv.mu.Unlock()
	}
	go func() {
		err := cmd.Wait()
		close(exited)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the %s child did not end\nstdout:\n%s\nstderr:\n%s", mode, out.String(), errb.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return out.String(), errb.String(), true
		}
	}
	if err != nil {
		t.Fatalf("the %s child failed: %v\nstdout:\n%s\nstderr:\n%s", mode, err, out.String(), errb.String())
	}
	return out.String(), errb.String(), false
}

// durableSetup writes wasm as name in a new directory, for the children to
// load, and starts the fake model they share.
func durableSetup(t *testing.T, name string, wasm []byte) (string, *fakemodel.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	// Compile the module once here, into the on-disk compilation cache the
	// children share: on a cold cache, a dozen children started at once
	// would each compile it beside the others and could spend their whole
	// deadline on it.
	plugintest.Load(t, plugintest.Runtime(t, plugins.Options{}), plugins.Source{Name: strings.TrimSuffix(name, ".wasm"), Wasm: wasm, Tenant: "acme"})
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	return path, model
}

// TestDurableCallSIGKILL kills a host at the boundaries of a durable
// plugin call: on files those of the first step and of step 3 (every
// kind of boundary, at the start and in the middle of the journal), on
// Redis and a Redis Cluster (where another host takes over) those of
// step 3, and every one on each with AGENTIC_DURABLE_ALL=1 (make soak:
// the whole matrix took 7.5 minutes of a loaded make test under -race).
func TestDurableCallSIGKILL(t *testing.T) {
	if os.Getenv(envDurableChild) != "" {
		t.Skip("a child")
	}
	wasmPath, model := durableSetup(t, "http_steps.wasm", httpStepsWasm(t))
	type kill struct {
		spec  string // the child's envDurableKill, or arrive:N / answered:N at the server
		twice int    // the step that reaches the server twice; -1: it may
	}
	var kills []kill
	for n := 1; n <= 2*durableSteps; n++ {
		// Write n is step (n+1)/2's send when odd, its answer when even:
		// killed before the answer's write, the request had arrived.
		beforeTwice := 0
		if n%2 == 0 {
			beforeTwice = n / 2
		}
		kills = append(kills, kill{spec: fmt.Sprintf("before:%d", n), twice: beforeTwice}, kill{spec: fmt.Sprintf("after:%d", n)})
	}
	for i := 1; i <= durableSteps; i++ {
		kills = append(kills, kill{spec: fmt.Sprintf("arrive:%d", i), twice: i}, kill{spec: fmt.Sprintf("answered:%d", i), twice: -1})
	}
	for _, kind := range durableStoreKinds {
		t.Run(kind, func(t *testing.T) {
			store := durableStore(t, kind)
			step3 := []string{"before:5", "after:5", "before:6", "after:6", "arrive:3", "answered:3"}
			step1 := []string{"before:1", "after:1", "before:2", "after:2", "arrive:1", "answered:1"}
			for _, k := range kills {
				if os.Getenv(envDurableAll) == "" && !slices.Contains(step3, k.spec) && (kind != "file" || !slices.Contains(step1, k.spec)) {
					// Every kind of boundary of step 3 (and, on files, of
					// step 1), the whole matrix with AGENTIC_DURABLE_ALL=1
					// (make soak): each kind of boundary is the same code
					// at every step, and a Redis store's append is the same
					// lease.Append at every boundary.
					continue
				}
				t.Run(k.spec, func(t *testing.T) {
					t.Parallel() // each with a server and a store of its own
					srv := newDurableServer(t)
					env := append([]string{envDurableModel + "=" + model.URL(), envDurableWasm + "=" + wasmPath, envDurableSteps + "=" + srv.URL},
						store(t)...)
					how, at, _ := strings.Cut(k.spec, ":")
					sendEnv := env
					if how == "before" || how == "after" {
						sendEnv = append(sendEnv, envDurableKill+"="+k.spec)
					} else {
						srv.killStep, _ = strconv.Atoi(at)
						srv.killWhen = how
					}
					stdout, stderr, killed := durableChild(t, srv, "send", sendEnv...)
					if !killed {
						t.Fatalf("the first host was not killed at %s\nstdout:\n%s\nstderr:\n%s", k.spec, stdout, stderr)
					}
					stdout, _, killed = durableChild(t, srv, "resume", env...)
					if killed {
						t.Fatal("the resuming host was killed")
					}
					checkDurable(t, srv, stdout, k.twice)
				})
			}
		})
	}
}

// redisPrefixes gives each subtest keys of its own on the shared server.
var redisPrefixes atomic.Int64

// durableStoreKinds are the stores the SIGKILL tests run on: files, one
// Redis, and a Redis Cluster of three primaries.
var durableStoreKinds = []string{"file", "redis", "cluster"}

// durableStore starts what kind needs and returns, for each subtest, the
// environment that gives its children a store of their own: a directory,
// or a key prefix on the shared server.
func durableStore(t *testing.T, kind string) func(t *testing.T) []string {
	var url string
	switch kind {
	case "redis":
		url = redistest.Start(t, redistest.Options{}).URL()
	case "cluster":
		url = "redis+cluster://" + strings.Join(redistest.StartCluster(t, 3).Addrs(), ",")
	}
	return func(t *testing.T) []string {
		if kind == "file" {
			return []string{envDurableStore + "=file:" + t.TempDir()}
		}
		return []string{envDurableStore + "=redis:" + url, envDurablePfx + "=d" + strconv.FormatInt(redisPrefixes.Add(1), 10)}
	}
}

// checkDurable checks the server's counts and the call's result.
func checkDurable(t *testing.T, srv *durableServer, stdout string, twice int) {
	t.Helper()
	srv.mu.Lock()
	keys := srv.keys
	srv.mu.Unlock()
	for i := 1; i <= durableSteps; i++ {
		want := 1
		if i == twice {
			want = 2
		}
		got := len(keys[i])
		if got != want && !(twice == -1 && (got == 1 || got == 2)) {
			t.Errorf("step %d reached the server %d times, want %d (keys %q)", i, got, want, keys[i])
		}
		for _, k := range keys[i] {
			if k != keys[i][0] || !strings.HasPrefix(k, "agentic-") {
				t.Errorf("step %d arrived with keys %q, want one agentic- key every time", i, keys[i])
				break
			}
		}
	}
	var line string
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), durableResult); ok {
			line = rest
		}
	}
	var results []ledger.ToolResult
	if err := json.Unmarshal([]byte(line), &results); err != nil || len(results) != 1 {
		t.Fatalf("the resumed host's ledger has tool results %s (%v), want one\n%s", line, err, stdout)
	}
	r := results[0]
	var out struct {
		Steps []struct {
			Step   int    `json:"step"`
			Answer string `json:"answer"`
			Key    string `json:"key"`
		} `json:"steps"`
	}
	if r.IsError || r.Synthetic || json.Unmarshal([]byte(r.Output), &out) != nil || len(out.Steps) != durableSteps {
		t.Fatalf("the call's result: %+v, want the answers of %d steps", r, durableSteps)
	}
	for i, s := range out.Steps {
		if s.Step != i+1 || s.Answer != fmt.Sprintf(`{"done":%d}`, i+1) || s.Key != keys[i+1][0] {
			t.Errorf("step %d of the result: %+v; the server saw keys %q", i+1, s, keys[i+1])
		}
	}
}

// TestDurableCallModuleChanged: the plugin is replaced between the crash
// and the resume (another build: another hash). The call is not replayed on
// it: its result is the typed refusal, which names both modules, and the
// run goes on (the agent's on_interrupted rule is resume); no step reaches
// the server again.
func TestDurableCallModuleChanged(t *testing.T) {
	if os.Getenv(envDurableChild) != "" {
		t.Skip("a child")
	}
	wasmPath, model := durableSetup(t, "http_steps.wasm", httpStepsWasm(t))
	srv := newDurableServer(t)
	env := []string{envDurableModel + "=" + model.URL(), envDurableWasm + "=" + wasmPath, envDurableSteps + "=" + srv.URL,
		envDurableStore + "=file:" + t.TempDir()}
	if _, stderr, killed := durableChild(t, srv, "send", append(env, envDurableKill+"=after:4")...); !killed {
		t.Fatalf("the first host was not killed\n%s", stderr)
	}
	stdout, _, _ := durableChild(t, srv, "resume", append(env, envDurableNew+"=1")...)
	srv.mu.Lock()
	keys := srv.keys
	srv.mu.Unlock()
	for i := 1; i <= durableSteps; i++ {
		want := 0
		if i <= 2 {
			want = 1
		}
		if len(keys[i]) != want {
			t.Errorf("step %d reached the server %d times, want %d", i, len(keys[i]), want)
		}
	}
	var line string
	for _, l := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, durableResult); ok {
			line = rest
		}
	}
	var results []ledger.ToolResult
	if err := json.Unmarshal([]byte(line), &results); err != nil || len(results) != 1 {
		t.Fatalf("tool results %s (%v)\n%s", line, err, stdout)
	}
	r := results[0]
	if !r.IsError || !strings.Contains(r.Output, "journal was made by another module") || !strings.Contains(r.Output, "4 host calls") {
		t.Errorf("the call's result: %+v, want the refusal to replay on another module", r)
	}
}

// killWhileWaiting starts a child that sends a message whose call waits,
// waits for it to report the run parked, and SIGKILLs it.
func killWhileWaiting(t *testing.T, env []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChild$", "-test.v")
	cmd.Env = append(append(os.Environ(), envDurableChild+"=send"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan bool, 1)
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if sc.Text() == durableWaiting {
				waiting <- true
				break
			}
		}
		close(waiting)
		_, _ = io.Copy(io.Discard, out)
	}()
	ok := false
	select {
	case ok = <-waiting:
	case <-time.After(60 * time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !ok {
		t.Fatalf("the first host never parked its run\nstderr:\n%s", errb.String())
	}
}

// TestWaitSurvivesSIGKILL: a host whose run waits — for an event, or a
// time — is SIGKILLed; another host (on files: the next process) completes
// the wait: the event posted to it, the time fired by it. The call returns
// what it waited for, once.
func TestWaitSurvivesSIGKILL(t *testing.T) {
	if os.Getenv(envDurableChild) != "" {
		t.Skip("a child")
	}
	wasmPath, model := durableSetup(t, "wait_event.wasm", waitEventWasm(t))
	srv := newDurableServer(t) // unused by these tools; the child reads its URL
	for _, kind := range durableStoreKinds {
		t.Run(kind, func(t *testing.T) {
			store := durableStore(t, kind)
			for _, tc := range []struct {
				name, tool, text, mode, want string
			}{
				{"event", "wait_event", "please wait_event key=order-7", "post", `"payload":"paid"`},
				{"timer", "wait_seconds", "please wait_seconds seconds=1", "watch", `"slept":1`},
			} {
				t.Run(tc.name, func(t *testing.T) {
					env := append([]string{envDurableModel + "=" + model.URL(), envDurableWasm + "=" + wasmPath, envDurableSteps + "=" + srv.URL,
						envDurableTool + "=" + tc.tool, envDurableText + "=" + tc.text, envDurableEvent + "=order-7"}, store(t)...)
					killWhileWaiting(t, env)
					stdout, stderr, killed := durableChild(t, srv, tc.mode, env...)
					if killed {
						t.Fatal("the second host was killed")
					}
					var line string
					for _, l := range strings.Split(stdout, "\n") {
						if rest, ok := strings.CutPrefix(l, durableResult); ok {
							line = rest
						}
					}
					var results []ledger.ToolResult
					if err := json.Unmarshal([]byte(line), &results); err != nil || len(results) != 1 {
						t.Fatalf("tool results %s (%v)\nstdout:\n%s\nstderr:\n%s", line, err, stdout, stderr)
					}
					if r := results[0]; r.IsError || !strings.Contains(r.Output, tc.want) {
						t.Fatalf("the call's result %+v, want %s", r, tc.want)
					}
				})
			}
		})
	}
}
