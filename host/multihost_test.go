//go:build unix

package host_test

// Several hosts on one Redis: each host.Host has its own redis.Store (its
// own connections), as separate processes would, on one real redis-server.
// TestMultiHostTakeoverAfterSIGKILL runs host A in a child process (this
// test binary, re-executed with -test.run=^TestMultiHostChild$) and kills it
// with SIGKILL mid-stream.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// mhLeaseTTL is the lease ttl of the in-process hosts: short, so that a
// takeover takes a fraction of a second.
const mhLeaseTTL = 300 * time.Millisecond

// mhWords returns n distinct words: the user text of a message whose echo
// ("You said: …") streams for n chunks of one word.
func mhWords(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(w, " ")
}

// mhOpen opens a Store of its own on the server, closed when the test ends.
func mhOpen(t *testing.T, url string) *redis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.Open(ctx, url, redis.Options{WatchBlock: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mhLogger writes warnings and errors into the test's log.
func mhLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t: t, prefix: name + ": "}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// mhHost builds a host over store named id, with the lease ttl mhLeaseTTL.
func mhHost(t *testing.T, store storage.Storage, id string, modelURL string, mutate ...func(*host.Options)) *host.Host {
	t.Helper()
	client, err := provider.New(provider.Config{BaseURL: modelURL, APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	opts := host.Options{Storage: store, Model: client,
		Agent: host.Agent{Model: "fake/echo"}, LeaseTTL: mhLeaseTTL, HostID: id, Logger: mhLogger(t, id),
		Retry: model.RetryPolicy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}
	for _, m := range mutate {
		m(&opts)
	}
	return hosttest.New(t, opts).Host
}

func mhModel(t *testing.T, opts fakemodel.Options) *fakemodel.Server {
	t.Helper()
	srv, err := fakemodel.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestMultiHostCrossHostSend: host A leads a long run of session s; a send
// to s through host B is queued and answered in A's run; B cannot resume s
// while A leads it.
func TestMultiHostCrossHostSend(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 15 * time.Millisecond, ChunkSize: 1})
	storeA, storeB := mhOpen(t, srv.URL()), mhOpen(t, srv.URL())
	hostA := mhHost(t, storeA, "host-a", model.URL())
	hostB := mhHost(t, storeB, "host-b", model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	long := mhWords("w", 80) // about 1.2 s of streaming
	streaming := make(chan struct{})
	var once sync.Once
	type result struct {
		res host.RunResult
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		res, err := hostA.Session("s").Send(ctx, long, host.SendOptions{OnProgress: func(p host.Progress) {
			if p.Type == host.ProgressText {
				once.Do(func() { close(streaming) })
			}
		}})
		aDone <- result{res, err}
	}()
	select {
	case <-streaming:
	case <-time.After(10 * time.Second):
		t.Fatal("host A never streamed")
	}

	// Exclusivity: B may not resume (nor lead) the session A leads.
	if _, err := hostB.Resume(ctx, "s"); !errors.Is(err, host.ErrLeadElsewhere) {
		t.Fatalf("hostB.Resume while A leads: err = %v, want ErrLeadElsewhere", err)
	}
	if hostB.IsRunning("s") {
		t.Fatal("host B runs s")
	}

	var acceptedRun atomic.Value
	start := time.Now()
	resB, errB := hostB.Session("s").Send(ctx, "second", host.SendOptions{OnAccepted: func(a host.Accepted) { acceptedRun.Store(a.RunID) }})
	bTook := time.Since(start)
	a := <-aDone
	// A's result is the run's: its answer is its last pass, B's answer.
	if a.err != nil || a.res.Status != ledger.RunCompleted || a.res.Text != "You said: second" {
		t.Fatalf("A's send: %+v %v", a.res, a.err)
	}
	if errB != nil || resB.Status != ledger.RunCompleted || resB.Text != "You said: second" {
		t.Fatalf("B's send: %+v %v", resB, errB)
	}
	if resB.RunID != a.res.RunID {
		t.Fatalf("B's message was answered by run %s, not by A's run %s", resB.RunID, a.res.RunID)
	}
	t.Logf("B's send returned after %v; accepted with run id %q", bTook, acceptedRun.Load())

	evs := hosttest.Load(t, storeA, "s")
	if got, want := kinds(evs), "input run-start input step step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if hosttest.CountKind(evs, ledger.KindRunStart) != 1 || hosttest.CountKind(evs, ledger.KindResumeAttempt) != 0 {
		t.Errorf("want one run and no resume: %s", kinds(evs))
	}
	q := evs[2]
	if q.RunID != "" || q.Input.MessageID != resB.MessageID {
		t.Errorf("the queued message = %+v, want run id \"\" and message %s", q, resB.MessageID)
	}
	if s := evs[4].Step; !slices.Equal(s.Inputs, []string{resB.MessageID}) || s.Text != "You said: second" {
		t.Errorf("the second pass = %+v, want it to fold in %s", s, resB.MessageID)
	}
	if evs[3].Step.Text != "You said: "+long || len(evs[3].Step.Inputs) != 0 {
		t.Errorf("the first pass = %q (inputs %v)", evs[3].Step.Text, evs[3].Step.Inputs)
	}
	if e := evs[5]; e.RunID != a.res.RunID || e.RunEnd.Status != ledger.RunCompleted {
		t.Errorf("run end = %+v", e)
	}
}

// gatedModel is a Model that signals entered and blocks until gate is
// closed, then streams from inner.
type gatedModel struct {
	inner   host.Model
	entered chan struct{}
	once    sync.Once
	gate    chan struct{}
}

func (g *gatedModel) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.gate:
	case <-ctx.Done():
		return model.Result{}, ctx.Err()
	}
	return g.inner.Stream(ctx, req, onDelta)
}

// stuckRenewals is a store whose leases cannot be renewed: Renew blocks
// until its deadline, as it would for a host cut off from Redis (or paused)
// — while appends still reach Redis, fenced by the real lease.
type stuckRenewals struct {
	*redis.Store
	renewals atomic.Int32
}

func (s *stuckRenewals) AcquireLease(ctx context.Context, id, owner string, ttl time.Duration) (storage.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, id, owner, ttl)
	if err != nil {
		return nil, err
	}
	return &stuckLease{Lease: l, s: s}, nil
}

type stuckLease struct {
	storage.Lease
	s *stuckRenewals
}

func (l *stuckLease) Renew(ctx context.Context) error {
	l.s.renewals.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestFencingLapsedLeaseRefusesAppends: host A leads a run but cannot renew
// its lease (it is stuck in a model call meanwhile); once the lease lapses,
// host B resumes and finishes the run; when A comes back with its pass, its
// fenced appends are refused: nothing A sends after B took over is written.
func TestFencingLapsedLeaseRefusesAppends(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1})
	storeA := &stuckRenewals{Store: mhOpen(t, srv.URL())}
	storeB := mhOpen(t, srv.URL())
	clientA, err := provider.New(provider.Config{BaseURL: model.URL(), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	gm := &gatedModel{inner: clientA, entered: make(chan struct{}), gate: make(chan struct{})}
	hostA := mhHost(t, storeA, "host-a", model.URL(), func(o *host.Options) { o.Model = gm })
	hostB := mhHost(t, storeB, "host-b", model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type result struct {
		res host.RunResult
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		res, err := hostA.Session("f").Send(ctx, "fenced message", host.SendOptions{})
		aDone <- result{res, err}
	}()
	select {
	case <-gm.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("host A never called the model")
	}

	// B takes over once A's lease lapses (at most one ttl after A took it).
	var resB host.RunResult
	start := time.Now()
	for {
		resB, err = hostB.Resume(ctx, "f")
		if !errors.Is(err, host.ErrLeadElsewhere) {
			break
		}
		if time.Since(start) > time.Minute { // a guard against a hang, not a speed check
			t.Fatal("A's lease never lapsed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("B resumed %v after A entered the model", time.Since(start))
	if err != nil || resB.Status != ledger.RunCompleted || resB.Text != "You said: fenced message" {
		t.Fatalf("B's resume: %+v %v", resB, err)
	}
	after := hosttest.Load(t, storeB, "f")
	if got, want := kinds(after), "input run-start resume-attempt step run-end"; got != want {
		t.Fatalf("ledger after B's resume = %q, want %q", got, want)
	}
	if ra := after[2].ResumeAttempt; ra.Host != "host-b" || ra.Attempt != 1 {
		t.Errorf("resume attempt = %+v", ra)
	}

	// A comes back with its pass: the append is refused, A stops.
	close(gm.gate)
	var a result
	select {
	case a = <-aDone:
	case <-time.After(15 * time.Second):
		t.Fatal("host A's send did not return")
	}
	if !errors.Is(a.err, storage.ErrLeaseLost) || a.res.Status != ledger.RunInterrupted {
		t.Errorf("A's send: %+v, err %v; want interrupted with storage.ErrLeaseLost", a.res, a.err)
	}
	if a.res.RunID != resB.RunID {
		t.Errorf("A ran %s, B resumed %s", a.res.RunID, resB.RunID)
	}
	final := hosttest.Load(t, storeB, "f")
	if len(final) != len(after) {
		t.Fatalf("A wrote after B took over: %s, then %s", kinds(after), kinds(final))
	}
	if storeA.renewals.Load() == 0 {
		t.Error("A never tried to renew")
	}
}

// TestMultiHostAutoResumeOnce: three hosts with auto-resume boot on a store
// holding six interrupted runs; each run is resumed by exactly one host,
// once, and completes; each host's agentic.lease.takeovers counts the
// runs it took over.
func TestMultiHostAutoResumeOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 10 * time.Millisecond, ChunkSize: 1})
	seed := mhOpen(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 6
	ids := make([]string, n)
	texts := map[string]string{}
	runs := map[string]string{}
	for i := range ids {
		id := fmt.Sprintf("ar-%d", i)
		ids[i] = id
		texts[id] = mhWords(fmt.Sprintf("s%dw", i), 20)
		runID, msgID := ledger.NewID("run"), ledger.NewID("msg")
		runs[id] = runID
		now := time.Now().UTC()
		evs := []ledger.Event{
			{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now, RunID: runID,
				Input: &ledger.Input{MessageID: msgID, Parts: []ledger.Part{ledger.TextPart(texts[id])}}},
			{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: runID,
				RunStart: &ledger.RunStart{Inputs: []string{msgID}, ResponseID: ledger.NewID("resp"), Agent: "default", Model: "fake/echo", MaxSteps: host.DefaultMaxSteps}},
		}
		for _, e := range evs {
			if err := ledger.Validate(e); err != nil {
				t.Fatal(err)
			}
		}
		if err := seed.Append(ctx, id, evs...); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	resumedBy := map[string][]string{}
	readers := map[string]*sdkmetric.ManualReader{}
	start := time.Now()
	for i := range 3 {
		name := fmt.Sprintf("host-%d", i)
		readers[name] = sdkmetric.NewManualReader()
		mhHost(t, mhOpen(t, srv.URL()), name, model.URL(), func(o *host.Options) {
			o.Telemetry = &host.Telemetry{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[name]))}
			o.AutoResume = &host.AutoResume{Interval: 100 * time.Millisecond, MaxConcurrent: 2,
				OnResumed: func(id string, res host.RunResult, err error) {
					mu.Lock()
					resumedBy[id] = append(resumedBy[id], name)
					mu.Unlock()
					if err != nil || res.Status != ledger.RunCompleted {
						t.Errorf("%s resumed %s: %+v %v", name, id, res, err)
					}
				}}
		})
	}
	for _, id := range ids {
		hosttest.WaitLedger(t, seed, id, 20*time.Second, "session "+id+" resumed", hosttest.Settled)
	}
	t.Logf("all %d runs completed %v after the hosts booted", n, time.Since(start))
	// Let the hosts sweep a few more times: nothing is resumed again.
	time.Sleep(5 * 100 * time.Millisecond)

	perHost := map[string]int{}
	for _, id := range ids {
		evs := hosttest.Load(t, seed, id)
		if got, want := kinds(evs), "input run-start resume-attempt step run-end"; got != want {
			t.Errorf("%s: ledger = %q, want %q", id, got, want)
			continue
		}
		ra := evs[2].ResumeAttempt
		if ra.Attempt != 1 || evs[2].RunID != runs[id] {
			t.Errorf("%s: resume attempt %+v of run %s", id, ra, evs[2].RunID)
		}
		perHost[ra.Host]++
		if e := evs[4]; e.RunID != runs[id] || e.RunEnd.Status != ledger.RunCompleted {
			t.Errorf("%s: run end %+v", id, e)
		}
		if s := evs[3].Step; s.Text != "You said: "+texts[id] {
			t.Errorf("%s: answer %q", id, s.Text)
		}
		mu.Lock()
		if by := resumedBy[id]; len(by) != 1 || by[0] != ra.Host {
			t.Errorf("%s: OnResumed by %v, ledger says %s", id, by, ra.Host)
		}
		mu.Unlock()
	}
	t.Logf("resumes per host: %v", perHost)
	for name, reader := range readers {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var takeovers int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "agentic.lease.takeovers" {
					for _, p := range d.DataPoints {
						takeovers += p.Value
					}
				}
			}
		}
		if takeovers != int64(perHost[name]) {
			t.Errorf("%s: agentic.lease.takeovers = %d, want the %d runs it resumed", name, takeovers, perHost[name])
		}
	}
}

// The environment of TestMultiHostChild.
const (
	envMHChild   = "AGENTIC_MH_CHILD" // "1": run as host A
	envMHRedis   = "AGENTIC_MH_REDIS"
	envMHModel   = "AGENTIC_MH_MODEL"
	envMHText    = "AGENTIC_MH_TEXT"
	envMHModels  = "AGENTIC_MH_MODELS" // the agent's model, then its fallbacks, comma-separated; default fake/echo
	mhStreamLine = "MH-CHILD-STREAMING"
	mhDoneLine   = "MH-CHILD-DONE"
)

// startMHChild starts host A in a child process (TestMultiHostChild) with
// the environment env, and returns it, its stdout and its stderr.
func startMHChild(t *testing.T, env ...string) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMultiHostChild$", "-test.v")
	cmd.Env = append(append(os.Environ(), envMHChild+"=1"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, stderr
}

// TestMultiHostChild is host A of TestMultiHostTakeoverAfterSIGKILL, in a
// child process; it skips unless that test started it.
func TestMultiHostChild(t *testing.T) {
	if os.Getenv(envMHChild) != "1" {
		t.Skip("a child process of TestMultiHostTakeoverAfterSIGKILL")
	}
	store := mhOpen(t, os.Getenv(envMHRedis))
	client, err := provider.New(provider.Config{BaseURL: os.Getenv(envMHModel), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	agent := host.Agent{Model: "fake/echo"}
	if m := os.Getenv(envMHModels); m != "" {
		models := strings.Split(m, ",")
		agent.Model, agent.Fallback = models[0], models[1:]
	}
	h, err := host.New(host.Options{Storage: store, Model: client,
		Agent: agent, LeaseTTL: mhLeaseTTL, HostID: "child-a",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	res, err := h.Session("k").Send(context.Background(), os.Getenv(envMHText), host.SendOptions{OnProgress: func(p host.Progress) {
		if p.Type == host.ProgressText {
			once.Do(func() { fmt.Fprintln(os.Stdout, mhStreamLine) })
		}
	}})
	fmt.Fprintf(os.Stdout, "%s %s %v\n", mhDoneLine, res.Status, err)
}

// TestMultiHostTakeoverAfterSIGKILL: host A, in a child process, leads a
// run and is killed mid-stream; host B (auto-resume, repeating every lease
// ttl) leaves the run alone while A lives, and resumes it once A's lease
// lapses.
func TestMultiHostTakeoverAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 10 * time.Millisecond, ChunkSize: 1})
	store := mhOpen(t, srv.URL())
	var resumed atomic.Int32
	hostB := mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL(), func(o *host.Options) {
		o.AutoResume = &host.AutoResume{OnResumed: func(string, host.RunResult, error) { resumed.Add(1) }}
	})

	long := mhWords("k", 150) // about 1.5 s of streaming
	cmd, stdout, stderr := startMHChild(t, envMHRedis+"="+srv.URL(), envMHModel+"="+model.URL(), envMHText+"="+long)
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child exited before streaming; stderr:\n%s", stderr.String())
			}
			if strings.HasPrefix(l, mhStreamLine) {
				break wait
			}
			if strings.HasPrefix(l, mhDoneLine) {
				t.Fatalf("the child finished before it was killed: %s", l)
			}
		case <-deadline:
			t.Fatal("the child never streamed")
		}
	}
	// While A lives, B's sweeps (every ttl) leave the session alone.
	time.Sleep(2 * mhLeaseTTL)
	if evs := hosttest.Load(t, store, "k"); hosttest.CountKind(evs, ledger.KindResumeAttempt) != 0 || len(ledger.OpenRuns(evs)) != 1 {
		t.Fatalf("B touched the session A leads: %s", kinds(evs))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	killedAt := time.Now()

	hosttest.WaitLedger(t, store, "k", time.Minute, "B resumed the run", func(evs []ledger.Event) bool {
		return hosttest.CountKind(evs, ledger.KindResumeAttempt) > 0
	})
	t.Logf("B resumed the run %v after the kill", time.Since(killedAt))
	// A message sent through B while its resumed run streams joins that
	// run. (It streams once the model got its request: A's was the first.)
	for model.RequestCount() < 2 {
		if time.Since(killedAt) > time.Minute {
			t.Fatal("B's resumed run never called the model")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resB, err := hostB.Session("k").Send(ctx, "second", host.SendOptions{})
	if err != nil || resB.Status != ledger.RunCompleted || resB.Text != "You said: second" {
		t.Fatalf("send through B: %+v %v", resB, err)
	}
	evs := hosttest.WaitLedger(t, store, "k", 10*time.Second, "B finished the run", hosttest.Settled)
	t.Logf("B finished the run %v after the kill", time.Since(killedAt))
	if got, want := kinds(evs), "input run-start resume-attempt input step step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	if resB.RunID != evs[1].RunID || !slices.Equal(evs[5].Step.Inputs, []string{resB.MessageID}) {
		t.Errorf("the message sent through B was answered by run %s, not by the resumed run %s (second pass inputs %v)",
			resB.RunID, evs[1].RunID, evs[5].Step.Inputs)
	}
	full := evs
	evs = slices.Delete(slices.Clone(evs), 3, 4) // the queued input
	evs = slices.Delete(evs, 4, 5)               // its pass
	if ra := evs[2].ResumeAttempt; ra.Host != "host-b" || ra.Attempt != 1 {
		t.Errorf("resume attempt = %+v", ra)
	}
	if ledger.TextOf(evs[0].Input.Parts) != long {
		t.Error("the input sent to A was not kept")
	}
	if s := evs[3].Step; s.Text != "You said: "+long {
		t.Errorf("answer = %.60q…", s.Text)
	}
	if e := evs[4]; e.RunEnd.Status != ledger.RunCompleted || e.RunID != evs[1].RunID {
		t.Errorf("run end = %+v", e)
	}
	time.Sleep(2 * mhLeaseTTL)
	if got := resumed.Load(); got != 1 {
		t.Errorf("B resumed %d times", got)
	}
	if evs2 := hosttest.Load(t, store, "k"); len(evs2) != len(full) {
		t.Errorf("the ledger grew after the run ended: %s", kinds(evs2))
	}
}

// TestMultiHostFallbackTakeover: on Redis, host A's run falls back from a
// model not served to the next, and A is SIGKILLed while the fallback
// model streams; host B takes the run over, falls back likewise (each pass
// starts again with the first model), and completes it. The ledger holds
// each host's fallback and one step, which names the model that answered.
func TestMultiHostFallbackTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	srv := redistest.Start(t, redistest.Options{})
	held := make(chan struct{}) // never closed: A dies in the pass it holds
	var echoes atomic.Int32
	model := mhModel(t, fakemodel.Options{Models: map[string]int{"fake/echo": 100000}, StrictModels: true, // acme/gone: 400 "is not a valid model ID"
		Respond: func(req fakemodel.Request) fakemodel.Reply {
			r := fakemodel.DefaultReply(req)
			if echoes.Add(1) == 1 {
				r.Hold, r.HoldAfter = held, 2
			}
			return r
		}})
	store := mhOpen(t, srv.URL())
	mhHost(t, mhOpen(t, srv.URL()), "host-b", model.URL(), func(o *host.Options) {
		o.Agent = host.Agent{Model: "acme/gone", Fallback: []string{"fake/echo"}}
		o.AutoResume = &host.AutoResume{}
	})

	cmd, stdout, stderr := startMHChild(t, envMHRedis+"="+srv.URL(), envMHModel+"="+model.URL(),
		envMHText+"=one two three four five", envMHModels+"=acme/gone,fake/echo")
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	for !strings.HasPrefix(sc.Text(), mhStreamLine) {
		if !sc.Scan() {
			t.Fatalf("the child exited before streaming; stderr:\n%s", stderr.String())
		}
		if strings.HasPrefix(sc.Text(), mhDoneLine) {
			t.Fatalf("the child finished before it was killed: %s", sc.Text())
		}
	}
	// A streams from fake/echo, held there: its fallback is in the ledger.
	if evs := hosttest.Load(t, store, "k"); hosttest.CountKind(evs, ledger.KindRetry) != 1 {
		t.Fatalf("A's ledger before the kill: %s", kinds(evs))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	evs := hosttest.WaitLedger(t, store, "k", time.Minute, "B completed the run", hosttest.Settled)
	if got, want := kinds(evs), "input run-start retry resume-attempt retry step run-end"; got != want {
		t.Fatalf("ledger = %q, want %q", got, want)
	}
	for _, i := range []int{2, 4} {
		if r := evs[i].Retry.Reason; !strings.HasPrefix(r, "model acme/gone: HTTP 400, the model is not served: ") || !strings.HasSuffix(r, "; falling back to fake/echo (it is not served)") {
			t.Errorf("event %d, a fallback: %q", i, r)
		}
	}
	if ra := evs[3].ResumeAttempt; ra.Host != "host-b" {
		t.Errorf("resume attempt = %+v", ra)
	}
	if s := evs[5].Step; s.Model != "fake/echo" || s.Text != "You said: one two three four five" {
		t.Errorf("step = model %q, text %q", s.Model, s.Text)
	}
	if e := evs[6].RunEnd; e.Status != ledger.RunCompleted {
		t.Errorf("run end = %+v", e)
	}
	if n := echoes.Load(); n != 2 {
		t.Errorf("fake/echo was asked %d times, want A's and B's", n)
	}
}

// TestMultiHostStatus: the status of a session is the same on every host
// sharing the storage — running on the host that leads the run and on the
// other (which reads the lease, and names its holder); interrupted on the
// other once the leader stopped without ending the run.
func TestMultiHostStatus(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 15 * time.Millisecond, ChunkSize: 1})
	storeA, storeB := mhOpen(t, srv.URL()), mhOpen(t, srv.URL())
	hostA := mhHost(t, storeA, "host-a", model.URL())
	hostB := mhHost(t, storeB, "host-b", model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := hostA.Session("s").Start(ctx, mhWords("w", 400), host.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStreaming(t, ctx, run)
	a, err := hostA.Session("s").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hostB.Session("s").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != host.StateRunning || b.State != host.StateRunning || a.RunID != run.ID() || b.RunID != a.RunID ||
		!strings.HasPrefix(b.Holder, "host-a") || !a.Since.Equal(b.Since) || a.Step != b.Step {
		t.Fatalf("while A runs s: on A %+v, on B %+v; want both running, B naming A as the holder", a, b)
	}
	// A stops without recording an end (as a crash would, but releasing
	// its lease): the run is interrupted, for B too.
	closeCtx, closeNow := context.WithCancel(ctx)
	closeNow()
	hostA.Close(closeCtx)
	b, err = hostB.Session("s").Status(ctx)
	if err != nil || b.State != host.StateInterrupted || b.RunID != run.ID() || b.Holder != "" {
		t.Fatalf("after A stopped: on B %+v %v, want interrupted", b, err)
	}
}
