//go:build unix

package host_test

// The child side of the crash tests in crash_test.go. The test binary runs
// itself (os.Args[0] -test.run=^TestCrashChild$) with environment variables
// that select the child mode; without them TestCrashChild skips, so an
// ordinary `go test` run never executes it.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// The environment of a child process.
const (
	envCrashChild  = "AGENTIC_CRASH_CHILD"          // "crash" or "bootloop"; absent: not a child
	envCrashDir    = "AGENTIC_CRASH_DIR"            // the seed's directory (ledger/ and charges.log)
	envCrashURL    = "AGENTIC_CRASH_MODEL_URL"      // the parent's fake model
	envKillAppend  = "AGENTIC_CRASH_KILL_APPEND"    // kill on this append of the process (1-based)
	envKillMode    = "AGENTIC_CRASH_KILL_MODE"      // before | torn | after
	envKillCharge  = "AGENTIC_CRASH_KILL_CHARGE"    // kill right after this execution of charge (1-based)
	envBoom        = "AGENTIC_CRASH_BOOM"           // bootloop: "1" makes the explode tool kill the process
	envAction      = "AGENTIC_CRASH_ACTION"         // bootloop: the action OnInterrupted picks; default: none
	crashReadyLine = "CRASH-CHILD-READY"            // printed on stdout when the child starts
	crashSweepLine = "CRASH-CHILD-SWEEP "           // followed by the LastSweep report as JSON
	crashKillLine  = "CRASH-CHILD-KILL "            // on stderr, right before a self-inflicted SIGKILL
	chargeLog      = "charges.log"                  // one line per execution of charge: "<call id> <session>"
	bootLoopID     = "loop"                         // the boot-loop test's session
	bootLoopReq    = "boom-1"                       // its message's request id
	bootLoopText   = "please explode the thing now" // names the explode tool
)

// crashMsg is one message the crash child sends.
type crashMsg struct {
	session, requestID, text string
	tools                    []string // the tools the fake model calls for it, in order
}

// crashSessions and crashMessages are the fixed workload: every session gets
// an echo, a read, a charge, and a read and a charge in one pass.
var crashSessions = []string{"s0", "s1", "s2"}

func crashMessages() []crashMsg {
	var msgs []crashMsg
	for _, s := range crashSessions {
		for i := range 4 {
			m := crashMsg{session: s, requestID: fmt.Sprintf("%s-m%d", s, i)}
			ref := fmt.Sprintf("%s-%d", s, i)
			switch i {
			case 0:
				m.text = fmt.Sprintf("hello from %s, message %d, with a few more words so that the reply streams for a while", s, i)
			case 1:
				m.text = "please lookup q=" + ref
				m.tools = []string{"lookup"}
			case 2:
				m.text = fmt.Sprintf("please charge amount=%d order=%s", 10+i, ref)
				m.tools = []string{"charge"}
			case 3:
				m.text = fmt.Sprintf("lookup q=%s, then charge amount=%d order=%s", ref, 10+i, ref)
				m.tools = []string{"lookup", "charge"}
			}
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// lookupOutput is the read tool's deterministic answer.
func lookupOutput(q string) string {
	b, _ := json.Marshal(map[string]string{"q": q, "value": "v-" + q})
	return string(b)
}

// chargeOutput is the charge tool's answer.
func chargeOutput(amount int, order, callID string) string {
	return fmt.Sprintf("charged %d to order %s (ref %s)", amount, order, callID)
}

// chargeUnknown is what the host tells the model about a charge whose
// outcome it does not know (see host.Session.Resume).
const chargeUnknown = "error: the outcome of this call of charge is unknown"

// die kills the process the way a crash does: no deferred function, no
// flush, no exit handler runs.
func die(why string) {
	fmt.Fprintln(os.Stderr, crashKillLine+why)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

func envInt(name string) int64 {
	n, _ := strconv.ParseInt(os.Getenv(name), 10, 64)
	return n
}

// killStore is the child's storage: the file store, with a crash injected
// into its N-th append (counted over the process, every session).
type killStore struct {
	*file.Store
	dir  string // the store's directory
	at   int64  // the append that kills; 0: none
	mode string // before | torn | after
	n    atomic.Int64
}

func (k *killStore) Append(ctx context.Context, id string, evs ...ledger.Event) error {
	if k.at == 0 || k.n.Add(1) != k.at {
		return k.Store.Append(ctx, id, evs...)
	}
	var ks []string
	for _, e := range evs {
		ks = append(ks, string(e.Kind))
	}
	what := fmt.Sprintf("append=%d mode=%s session=%s kinds=%s", k.at, k.mode, id, strings.Join(ks, ","))
	switch k.mode {
	case "before":
		die(what)
	case "torn":
		// What a crash in the middle of the store's write(2) leaves: the
		// first half of the batch's record, without its newline.
		rec, err := encodeBatch(evs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "encode:", err)
			os.Exit(3)
		}
		f, err := os.OpenFile(filepath.Join(k.dir, id+".jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "torn write:", err)
			os.Exit(3)
		}
		if _, err := f.Write(rec[:len(rec)/2]); err != nil {
			fmt.Fprintln(os.Stderr, "torn write:", err)
			os.Exit(3)
		}
		die(what)
	case "after":
		err := k.Store.Append(ctx, id, evs...)
		die(fmt.Sprintf("%s (append err=%v)", what, err))
	}
	return k.Store.Append(ctx, id, evs...)
}

// encodeBatch is the file store's framing of one Append: an event's
// encoding, or an array of them, and a newline.
func encodeBatch(evs []ledger.Event) ([]byte, error) {
	var parts [][]byte
	for _, e := range evs {
		b, err := ledger.Encode(e)
		if err != nil {
			return nil, err
		}
		parts = append(parts, b)
	}
	if len(parts) == 1 {
		return append(parts[0], '\n'), nil
	}
	rec := []byte{'['}
	for i, p := range parts {
		if i > 0 {
			rec = append(rec, ',')
		}
		rec = append(rec, p...)
	}
	return append(rec, ']', '\n'), nil
}

// crashTools are the child's tools: lookup reads; charge has an external
// effect, is not idempotent, and records every execution durably before it
// returns (killing the process right after the record, on its killAt-th
// execution).
func crashTools(chargePath string, killAt int64) []host.Tool {
	var charges atomic.Int64
	lookup := host.NewTool(host.ToolSpec{
		Name:        "lookup",
		Description: "Look a key up.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
		Effect:      host.EffectRead,
	}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
		var in struct{ Q string }
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return host.ToolResult{}, err
		}
		return host.ToolResult{Output: lookupOutput(in.Q)}, nil
	})
	charge := host.NewTool(host.ToolSpec{
		Name:        "charge",
		Description: "Charge an order. Not idempotent.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"},"order":{"type":"string"}},"required":["amount","order"]}`),
		Effect:      host.EffectExternal,
	}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
		var in struct {
			Amount int
			Order  string
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return host.ToolResult{}, err
		}
		f, err := os.OpenFile(chargePath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return host.ToolResult{}, err
		}
		_, err = f.WriteString(c.ID + " " + c.SessionID + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return host.ToolResult{}, err
		}
		if killAt > 0 && charges.Add(1) == killAt {
			die("charge call=" + c.ID + " session=" + c.SessionID)
		}
		return host.ToolResult{Output: chargeOutput(in.Amount, in.Order, c.ID)}, nil
	})
	return []host.Tool{lookup, charge}
}

// TestCrashChild is the child process of TestCrashRecovery and
// TestBootLoop; it skips unless the parent started it.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(envCrashChild)
	if mode == "" {
		t.Skip("a child process of TestCrashRecovery / TestBootLoop")
	}
	fmt.Fprintln(os.Stdout, crashReadyLine)
	switch mode {
	case "crash":
		crashChild(t)
	case "bootloop":
		bootLoopChild(t)
	case "delegate":
		delegateChild(t)
	default:
		t.Fatalf("unknown child mode %q", mode)
	}
}

func childLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// childHost opens the file store (wrapped with the injected crash) and a host
// with auto-resume over it, and waits for the boot sweep.
func childHost(t *testing.T, tools []host.Tool, maxAttempts int) (*host.Host, *killStore) {
	dir := filepath.Join(os.Getenv(envCrashDir), "ledger")
	log := childLogger()
	fs, err := file.Open(dir, file.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	store := &killStore{Store: fs, dir: dir, at: envInt(envKillAppend), mode: os.Getenv(envKillMode)}
	auto := &host.AutoResume{MaxAttempts: maxAttempts}
	if a := host.ResumeAction(os.Getenv(envAction)); a != "" {
		auto.OnInterrupted = func(context.Context, host.Interrupted) (host.ResumeAction, error) { return a, nil }
	}
	client, err := provider.New(provider.Config{BaseURL: os.Getenv(envCrashURL), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h := hosttest.New(t, host.Options{
		Storage:    store,
		Model:      client,
		Agent:      host.Agent{Model: "fake/echo", Tools: tools, ToolApprovals: map[string]host.ApprovalMode{"charge": host.ApproveAlways}},
		Logger:     log,
		Retry:      model.RetryPolicy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		AutoResume: auto,
	}).Host
	select {
	case <-h.SweepDone():
	case <-time.After(40 * time.Second):
		t.Fatal("the boot sweep did not finish")
	}
	rep := h.LastSweep()
	b, _ := json.Marshal(rep)
	fmt.Fprintln(os.Stdout, crashSweepLine+string(b))
	return h, store
}

// crashChild boots, lets the sweep finish the interrupted runs, then sends
// every message of the workload the ledgers do not hold yet, the sessions in
// parallel, and returns (exit 0) once all are answered.
func crashChild(t *testing.T) {
	chargePath := filepath.Join(os.Getenv(envCrashDir), chargeLog)
	h, store := childHost(t, crashTools(chargePath, envInt(envKillCharge)), 10)
	if rep := h.LastSweep(); rep.Errors != 0 || rep.GaveUp != 0 {
		t.Errorf("boot sweep: %+v", rep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	bySession := map[string][]crashMsg{}
	for _, m := range crashMessages() {
		bySession[m.session] = append(bySession[m.session], m)
	}
	var wg sync.WaitGroup
	for s, msgs := range bySession {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, err := store.Load(ctx, s)
			if err != nil {
				t.Errorf("load %s: %v", s, err)
				return
			}
			sent := map[string]bool{}
			for _, e := range evs {
				if e.Input != nil {
					sent[e.Input.RequestID] = true
				}
			}
			if open := ledger.OpenRuns(evs); len(open) != 0 {
				t.Errorf("%s: runs still open after the boot sweep: %v", s, open)
			}
			for _, m := range msgs {
				if sent[m.requestID] {
					continue
				}
				res, err := h.Session(s).Send(ctx, m.text, host.SendOptions{RequestID: m.requestID})
				if err != nil || res.Status != ledger.RunCompleted {
					t.Errorf("%s %s: %+v %v", s, m.requestID, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// bootLoopChild boots (the sweep resumes the loop session's run, whose tool
// kills the process while AGENTIC_CRASH_BOOM=1), then sends the message if
// the ledger does not hold it yet.
func bootLoopChild(t *testing.T) {
	explode := host.NewTool(host.ToolSpec{Name: "explode", Description: "Explode the thing."},
		func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
			if os.Getenv(envBoom) == "1" {
				die("explode call=" + c.ID)
			}
			return host.ToolResult{Output: "exploded"}, nil
		})
	h, store := childHost(t, []host.Tool{explode}, 3)
	evs, err := store.Load(context.Background(), bootLoopID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Input != nil && e.Input.RequestID == bootLoopReq {
			return // sent by an earlier boot
		}
	}
	res, err := h.Session(bootLoopID).Send(context.Background(), bootLoopText, host.SendOptions{RequestID: bootLoopReq})
	t.Logf("send: %+v %v", res, err)
}
