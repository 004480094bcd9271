//go:build unix

package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// childSpec is one child process: where it dies, if anywhere.
type childSpec struct {
	kind       string        // "fresh", "timer", "append-before", "append-torn", "append-after", "tool"
	delay      time.Duration // timer: SIGKILL from the parent this long after the child started
	appendAt   int           // append-*: the append that kills
	chargeKill int           // tool: the charge execution that kills
}

func (s childSpec) String() string {
	switch s.kind {
	case "timer":
		return fmt.Sprintf("timer(%s)", s.delay)
	case "tool":
		return fmt.Sprintf("tool(charge #%d)", s.chargeKill)
	case "fresh":
		return "fresh"
	}
	return fmt.Sprintf("%s(#%d)", s.kind, s.appendAt)
}

// childResult is how a child ended.
type childResult struct {
	killed         bool // by SIGKILL, its own or the parent's
	exit           int  // the exit code, when not killed
	stdout, stderr string
	elapsed        time.Duration
}

func (r childResult) String() string {
	if r.killed {
		return fmt.Sprintf("killed after %s", r.elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("exit %d after %s", r.exit, r.elapsed.Round(time.Millisecond))
}

// selfKill returns the child's note of its self-inflicted SIGKILL, if any.
func (r childResult) selfKill() string {
	for _, l := range strings.Split(r.stderr, "\n") {
		if s, ok := strings.CutPrefix(l, crashKillLine); ok {
			return s
		}
	}
	return ""
}

// sweepReport returns the boot sweep report the child printed.
func (r childResult) sweepReport() (host.SweepReport, bool) {
	for _, l := range strings.Split(r.stdout, "\n") {
		if s, ok := strings.CutPrefix(l, crashSweepLine); ok {
			var rep host.SweepReport
			return rep, json.Unmarshal([]byte(s), &rep) == nil
		}
	}
	return host.SweepReport{}, false
}

// readyWriter collects a child's stdout and tells when it started.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte(crashReadyLine+"\n")) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runChild re-executes the test binary as a child of the given mode.
func runChild(t *testing.T, mode, dir, modelURL string, spec childSpec, extraEnv ...string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=90s")
	env := append(os.Environ(), envCrashChild+"="+mode, envCrashDir+"="+dir, envCrashURL+"="+modelURL)
	switch spec.kind {
	case "append-before", "append-torn", "append-after":
		env = append(env, fmt.Sprintf("%s=%d", envKillAppend, spec.appendAt),
			envKillMode+"="+strings.TrimPrefix(spec.kind, "append-"))
	case "tool":
		env = append(env, fmt.Sprintf("%s=%d", envKillCharge, spec.chargeKill))
	}
	// The race runtime sleeps a second before a normal exit (GORACE
	// atexit_sleep_ms): skip it, the parent waits for every child.
	env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(env, extraEnv...)
	stdout := &readyWriter{ready: make(chan struct{})}
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var timerDone sync.WaitGroup
	if spec.kind == "timer" {
		timerDone.Add(1)
		go func() {
			defer timerDone.Done()
			select {
			case <-stdout.ready:
			case <-done:
				return
			}
			select {
			case <-time.After(spec.delay):
				cmd.Process.Signal(syscall.SIGKILL) // fails harmlessly when the child is gone
			case <-done:
			}
		}()
	}
	err := cmd.Wait()
	close(done)
	timerDone.Wait()
	res := childResult{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			res.killed = true
		} else {
			res.exit = ee.ExitCode()
		}
	default:
		t.Fatalf("child: %v", err)
	}
	return res
}

// crashStats sums what the seeds covered, for the log.
type crashStats struct {
	mu                sync.Mutex
	killsByKind       map[string]int // children that died, by kill kind
	missedByKind      map[string]int // children whose kill point never came
	unknownCharge     int            // charges whose outcome the host did not know
	chargedThenKilled int            // charge executions whose result the ledger lacks
	tornDropped       int
	children          int
}

func (s *crashStats) add(f func(*crashStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

var crashKillKinds = []string{"timer", "append-before", "append-torn", "append-after", "tool"}

// crashSeedPlan derives a seed's kill children from the seed alone.
func crashSeedPlan(seed int) []childSpec {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x63726173685f7465))
	rounds := 1 + rng.IntN(2) // a second kill hits the recovery of the first
	var plan []childSpec
	for r := range rounds {
		s := childSpec{kind: crashKillKinds[(seed+r*3)%len(crashKillKinds)]}
		switch s.kind {
		case "timer":
			s.delay = time.Duration(rng.IntN(301)) * time.Millisecond
		case "tool":
			s.chargeKill = 1 + rng.IntN(3)
		default:
			s.appendAt = 1 + rng.IntN(60)
		}
		plan = append(plan, s)
	}
	return plan
}

// TestCrashRecovery SIGKILLs a child host process at points chosen per
// seed — from the parent at a random moment, or from inside the child in an
// append (before it, half-written, after it) or right after the non-
// idempotent charge tool took effect — then boots fresh children until one
// finishes the workload, and checks the ledgers: no input lost or
// duplicated, no run left open or ended otherwise than completed, no
// response duplicated, and no charge executed twice.
func TestCrashRecovery(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	seeds := 60
	if testing.Short() {
		seeds = 8
	}
	stats := &crashStats{killsByKind: map[string]int{}, missedByKind: map[string]int{}}
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%d seeds, %d child processes in %s; killed by kind %v; kill point never reached %v; "+
			"%d charges with an unknown outcome (%d of them executed, result lost); %d torn tails dropped",
			seeds, stats.children, time.Since(start).Round(time.Millisecond), stats.killsByKind, stats.missedByKind,
			stats.unknownCharge, stats.chargedThenKilled, stats.tornDropped)
	})
	// Children mostly wait on the model's latency: seeds run in parallel
	// (-test.parallel, GOMAXPROCS by default), at most 4 at once.
	sem := make(chan struct{}, 4)
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%02d", seed), func(t *testing.T) {
			t.Parallel()
			sem <- struct{}{}
			defer func() { <-sem }()
			crashSeed(t, seed, srv.URL(), stats)
		})
	}
}

func crashSeed(t *testing.T, seed int, modelURL string, stats *crashStats) {
	dir := t.TempDir()
	var history []string
	defer func() { t.Logf("children: %s", strings.Join(history, "; ")) }()
	for _, spec := range crashSeedPlan(seed) {
		res := runChild(t, "crash", dir, modelURL, spec)
		history = append(history, fmt.Sprintf("%s: %s %s", spec, res, res.selfKill()))
		stats.add(func(s *crashStats) {
			s.children++
			if res.killed {
				s.killsByKind[spec.kind]++
			} else {
				s.missedByKind[spec.kind]++
			}
		})
		switch {
		case res.killed:
		case res.exit == 0:
			// The kill point never came: the child finished the work.
		default:
			t.Fatalf("kill child %s: %s\nstdout:\n%s\nstderr:\n%s", spec, res, res.stdout, res.stderr)
		}
		if spec.kind == "append-torn" && res.killed {
			if checkTornTail(t, dir, res.selfKill()) {
				stats.add(func(s *crashStats) { s.tornDropped++ })
			}
		}
	}
	var final childResult
	for i := range 5 {
		final = runChild(t, "crash", dir, modelURL, childSpec{kind: "fresh"})
		history = append(history, fmt.Sprintf("fresh: %s", final))
		stats.add(func(s *crashStats) { s.children++ })
		if !final.killed && final.exit == 0 {
			break
		}
		t.Errorf("fresh child %d: %s\nstdout:\n%s\nstderr:\n%s", i, final, final.stdout, final.stderr)
	}
	if final.killed || final.exit != 0 {
		t.Fatalf("no fresh child finished the work")
	}
	unknown, lost := checkCrashLedgers(t, dir)
	stats.add(func(s *crashStats) { s.unknownCharge += unknown; s.chargedThenKilled += lost })
}

// checkTornTail checks, right after a child died in the middle of writing a
// record, that the session file ends with the torn record and that the file
// store drops it with a warning. It reports whether it found one.
func checkTornTail(t *testing.T, dir, note string) bool {
	t.Helper()
	var session string
	for _, f := range strings.Fields(note) {
		if s, ok := strings.CutPrefix(f, "session="); ok {
			session = s
		}
	}
	if session == "" {
		t.Errorf("no session in the kill note %q", note)
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, "ledger", session+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] == '\n' {
		t.Errorf("%s: no torn tail after a torn write (%q)", session, note)
		return false
	}
	var warned lockedBuffer
	fs, err := file.Open(filepath.Join(dir, "ledger"), file.Options{Logger: slog.New(slog.NewTextHandler(&warned, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	evs, err := fs.Load(context.Background(), session)
	if err != nil {
		t.Fatalf("%s: load with a torn tail: %v", session, err)
	}
	if !strings.Contains(warned.String(), "torn tail") {
		t.Errorf("%s: the torn tail was dropped without a warning: %q", session, warned.String())
	}
	complete := bytes.Count(data, []byte{'\n'})
	if n := countRecords(t, data[:bytes.LastIndexByte(data, '\n')+1]); n != len(evs) || complete > len(evs) {
		t.Errorf("%s: loaded %d events from %d complete records (%d events)", session, len(evs), complete, n)
	}
	return true
}

// countRecords decodes every line of data strictly and returns the number
// of events.
func countRecords(t *testing.T, data []byte) int {
	t.Helper()
	n := 0
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		raws := []json.RawMessage{line}
		if line[0] == '[' {
			raws = nil
			if err := json.Unmarshal(line, &raws); err != nil {
				t.Errorf("line %d: %v", i+1, err)
				continue
			}
		}
		for _, raw := range raws {
			if _, err := ledger.Decode(raw); err != nil {
				t.Errorf("line %d: %v", i+1, err)
			}
			n++
		}
	}
	return n
}

// checkCrashLedgers checks the final state of a seed's directory. It returns
// how many charges ended with an unknown outcome, and how many of those had
// executed.
func checkCrashLedgers(t *testing.T, dir string) (unknown, executedUnknown int) {
	t.Helper()
	charged := map[string]int{} // call id → executions
	if data, err := os.ReadFile(filepath.Join(dir, chargeLog)); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 {
				charged[f[0]]++
			} else {
				t.Errorf("charges.log: malformed line %q", sc.Text())
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for id, n := range charged {
		if n != 1 {
			t.Errorf("charge ran %d times for call %s", n, id)
		}
	}

	var warned lockedBuffer
	fs, err := file.Open(filepath.Join(dir, "ledger"), file.Options{Logger: slog.New(slog.NewTextHandler(&warned, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	want := map[string][]crashMsg{}
	for _, m := range crashMessages() {
		want[m.session] = append(want[m.session], m)
	}
	ledgerCalls := map[string]bool{}
	for _, session := range crashSessions {
		data, err := os.ReadFile(filepath.Join(dir, "ledger", session+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			t.Errorf("%s: a torn tail survived recovery", session)
		}
		n := countRecords(t, data)
		evs, err := fs.Load(context.Background(), session)
		if err != nil {
			t.Fatalf("%s: %v", session, err)
		}
		if len(evs) != n {
			t.Errorf("%s: loaded %d events, the file holds %d", session, len(evs), n)
		}
		u, e := checkCrashSession(t, session, evs, want[session], charged, ledgerCalls)
		unknown += u
		executedUnknown += e
	}
	if w := warned.String(); w != "" {
		t.Errorf("the final ledgers load with warnings: %s", w)
	}
	for id := range charged {
		if !ledgerCalls[id] {
			t.Errorf("charge ran for call %s, which no ledger holds", id)
		}
	}
	return unknown, executedUnknown
}

func checkCrashSession(t *testing.T, session string, evs []ledger.Event, msgs []crashMsg, charged map[string]int, ledgerCalls map[string]bool) (unknown, executedUnknown int) {
	t.Helper()
	if open := ledger.OpenRuns(evs); len(open) != 0 {
		t.Errorf("%s: open runs %v", session, open)
	}
	// The ledger holds no event twice, no pass twice, no result twice.
	seenEvent, seenStep, seenResult := map[string]bool{}, map[string]bool{}, map[string]bool{}
	inputs := map[string][]*ledger.Input{} // request id → inputs
	var runs []string
	for _, e := range evs {
		if seenEvent[e.ID] {
			t.Errorf("%s: event %s appended twice", session, e.ID)
		}
		seenEvent[e.ID] = true
		switch {
		case e.Input != nil:
			inputs[e.Input.RequestID] = append(inputs[e.Input.RequestID], e.Input)
		case e.RunStart != nil:
			runs = append(runs, e.RunID)
		case e.Step != nil:
			if seenStep[e.Step.ResponseID] {
				t.Errorf("%s: response %s stepped twice", session, e.Step.ResponseID)
			}
			seenStep[e.Step.ResponseID] = true
			for _, c := range e.Step.ToolCalls {
				ledgerCalls[c.ID] = true
			}
		case e.ToolResult != nil:
			if seenResult[e.ToolResult.CallID] {
				t.Errorf("%s: call %s answered twice", session, e.ToolResult.CallID)
			}
			seenResult[e.ToolResult.CallID] = true
		}
	}
	// Every message is in the ledger exactly once.
	byMessageID := map[string]crashMsg{}
	for _, m := range msgs {
		got := inputs[m.requestID]
		if len(got) != 1 {
			t.Errorf("%s: message %s is in the ledger %d times", session, m.requestID, len(got))
			continue
		}
		if txt := ledger.TextOf(got[0].Parts); txt != m.text {
			t.Errorf("%s: message %s text %q, want %q", session, m.requestID, txt, m.text)
		}
		byMessageID[got[0].MessageID] = m
		delete(inputs, m.requestID)
	}
	for rid, in := range inputs {
		t.Errorf("%s: %d unexpected inputs with request id %q", session, len(in), rid)
	}
	if len(runs) != len(msgs) {
		t.Errorf("%s: %d runs for %d messages", session, len(runs), len(msgs))
	}

	tr := ledger.ProjectSession(session, evs)
	itemIDs := map[string]bool{}
	items := map[string][]ledger.Item{} // run → response items
	for _, it := range tr.Items {
		if itemIDs[it.ID] {
			t.Errorf("%s: transcript item %s twice", session, it.ID)
		}
		itemIDs[it.ID] = true
		if it.Kind == ledger.ItemResponse {
			items[it.RunID] = append(items[it.RunID], it)
		}
	}
	for _, runID := range runs {
		run, _ := ledger.ProjectRun(evs, runID)
		if !run.Ended || run.Status != ledger.RunCompleted {
			t.Errorf("%s: run %s ended=%v %s %q", session, runID, run.Ended, run.Status, run.Reason)
		}
		if len(run.Inputs) != 1 {
			t.Errorf("%s: run %s answers %v", session, runID, run.Inputs)
			continue
		}
		m, ok := byMessageID[run.Inputs[0]]
		if !ok {
			t.Errorf("%s: run %s answers an unknown message %s", session, runID, run.Inputs[0])
			continue
		}
		resp := items[runID]
		for _, it := range resp {
			if it.Status != ledger.StatusCompleted {
				t.Errorf("%s: %s: response %s is %s (%s)", session, m.requestID, it.ID, it.Status, it.Reason)
			}
		}
		if len(m.tools) == 0 {
			if len(resp) != 1 || resp[0].Text != "You said: "+m.text {
				t.Errorf("%s: %s: responses %+v", session, m.requestID, resp)
			}
			continue
		}
		if len(resp) != 2 {
			t.Errorf("%s: %s: %d responses, want 2: %+v", session, m.requestID, len(resp), resp)
			continue
		}
		if want := "Let me use " + strings.Join(m.tools, " and ") + "."; resp[0].Text != want {
			t.Errorf("%s: %s: first response %q, want %q", session, m.requestID, resp[0].Text, want)
		}
		if len(run.Steps) != 2 || len(run.Steps[0].ToolCalls) != len(m.tools) {
			t.Errorf("%s: %s: steps %+v", session, m.requestID, run.Steps)
			continue
		}
		results := map[string]ledger.ToolResult{}
		for _, r := range run.Results {
			results[r.CallID] = r
		}
		var lines []string
		for i, c := range run.Steps[0].ToolCalls {
			if c.Name != m.tools[i] {
				t.Errorf("%s: %s: call %d is %s", session, m.requestID, i, c.Name)
			}
			r, ok := results[c.ID]
			if !ok {
				t.Errorf("%s: %s: call %s has no result", session, m.requestID, c.ID)
				continue
			}
			lines = append(lines, "The "+c.Name+" tool returned: "+r.Output)
			var in struct {
				Q      string
				Amount int
				Order  string
			}
			json.Unmarshal([]byte(c.Arguments), &in)
			switch c.Name {
			case "lookup":
				if r.IsError || r.Output != lookupOutput(in.Q) {
					t.Errorf("%s: %s: lookup result %+v", session, m.requestID, r)
				}
			case "charge":
				switch {
				case r.Synthetic && strings.HasPrefix(r.Output, chargeUnknown):
					unknown++
					if charged[c.ID] > 0 {
						executedUnknown++
					}
				case !r.Synthetic && !r.IsError && r.Output == chargeOutput(in.Amount, in.Order, c.ID):
					if charged[c.ID] != 1 {
						t.Errorf("%s: %s: the ledger says charge %s ran, charges.log has it %d times", session, m.requestID, c.ID, charged[c.ID])
					}
				default:
					t.Errorf("%s: %s: charge result %+v", session, m.requestID, r)
				}
			}
		}
		if want := strings.Join(lines, "\n"); resp[1].Text != want {
			t.Errorf("%s: %s: final response %q, want %q", session, m.requestID, resp[1].Text, want)
		}
	}
	return unknown, executedUnknown
}

// TestBootLoop: a run whose tool kills the process, on its first run and on
// every resume. Each boot's sweep resumes it (and dies) until the ledger
// holds AutoResume.MaxAttempts resume attempts; the next boot gives up,
// boots normally and keeps the input and the open run; a manual Resume with
// a tool that no longer kills finishes it.
func TestBootLoop(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	ledgerDir := filepath.Join(dir, "ledger")
	state := func() (inputs int, open []string, attempts int) {
		fs, err := file.Open(ledgerDir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		evs, err := fs.Load(context.Background(), bootLoopID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Input != nil && e.Input.RequestID == bootLoopReq {
				inputs++
			}
		}
		open = ledger.OpenRuns(evs)
		if len(open) > 0 {
			run, _ := ledger.ProjectRun(evs, open[len(open)-1])
			attempts = run.ResumeAttempts
		}
		return inputs, open, attempts
	}
	// Boot 1 sends and dies in the tool; boots 2-4 resume and die in it.
	for boot := 1; boot <= 4; boot++ {
		res := runChild(t, "bootloop", dir, srv.URL(), childSpec{kind: "fresh"}, envBoom+"=1")
		if !res.killed || !strings.Contains(res.selfKill(), "explode") {
			t.Fatalf("boot %d: %s, want killed in the tool\nstdout:\n%s\nstderr:\n%s", boot, res, res.stdout, res.stderr)
		}
		inputs, open, attempts := state()
		if inputs != 1 || len(open) != 1 || attempts != boot-1 {
			t.Fatalf("after boot %d: %d inputs, open runs %v, %d resume attempts; want 1, one, %d", boot, inputs, open, attempts, boot-1)
		}
	}
	// Boot 5: three attempts failed; the sweep gives up and the host boots.
	res := runChild(t, "bootloop", dir, srv.URL(), childSpec{kind: "fresh"}, envBoom+"=1")
	if res.killed || res.exit != 0 {
		t.Fatalf("boot 5: %s\nstdout:\n%s\nstderr:\n%s", res, res.stdout, res.stderr)
	}
	rep, ok := res.sweepReport()
	if !ok || rep.GaveUp != 1 || rep.Interrupted != 1 || rep.Resumed != 0 || rep.Errors != 0 {
		t.Fatalf("boot 5 sweep: %+v (reported %v)", rep, ok)
	}
	inputs, open, attempts := state()
	if inputs != 1 || len(open) != 1 || attempts != 3 {
		t.Fatalf("after boot 5: %d inputs, open runs %v, %d resume attempts", inputs, open, attempts)
	}

	// A manual resume, in process, with a tool that no longer kills.
	var calls atomic.Int32
	explode := host.NewTool(host.ToolSpec{Name: "explode"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		calls.Add(1)
		return host.ToolResult{Output: "defused"}, nil
	})
	fs, err := file.Open(ledgerDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	h, err := host.New(host.Options{Storage: fs, Model: mustClient(t, srv),
		Agent: host.Agent{Model: "fake/echo", Tools: []host.Tool{explode}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	got, err := h.Resume(context.Background(), bootLoopID)
	if err != nil || got.Status != ledger.RunCompleted || got.Text != "The explode tool returned: defused" || got.RunID != open[0] {
		t.Fatalf("manual resume: %+v %v", got, err)
	}
	if calls.Load() != 1 {
		t.Errorf("the tool ran %d times on the manual resume", calls.Load())
	}
	inputs, open, _ = state()
	if inputs != 1 || len(open) != 0 {
		t.Errorf("after the manual resume: %d inputs, open runs %v", inputs, open)
	}
	evs, _ := fs.Load(context.Background(), bootLoopID)
	var ks []string
	for _, e := range evs {
		ks = append(ks, string(e.Kind))
	}
	// Three attempts of the sweeps, one of the manual resume.
	if want := "input run-start step resume-attempt resume-attempt resume-attempt resume-attempt tool-result step run-end"; strings.Join(ks, " ") != want {
		t.Errorf("ledger = %q, want %q", strings.Join(ks, " "), want)
	}
}
