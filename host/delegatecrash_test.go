//go:build unix

package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// The sub-agent workload of TestDelegateCrashPoints: one message to the
// session "lead", whose agent hands a task to "researcher", whose run
// calls charge (external, not idempotent, recorded durably per execution).
const (
	delegateSession = "lead"
	delegateReq     = "lead-1"
	delegateText    = `ask the researcher task="please charge amount=5 order=o-1"`
)

// TestDelegateCrashPoints SIGKILLs a host process on each append of a
// sub-agent's workload (before it is written, half-written, and right after), then
// boots fresh processes until one finishes it, and checks the ledgers:
// one message and one run in the child session, the parent's one message
// answered once, with the child's answer, and charge never executed twice.
func TestDelegateCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary many times")
	}
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 2 * time.Millisecond, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, mode := range []string{"before", "torn", "after"} {
		for at := 1; ; at++ {
			dir := t.TempDir()
			res := runChild(t, "delegate", dir, srv.URL(), childSpec{kind: "append-" + mode, appendAt: at})
			if !res.killed {
				if res.exit != 0 {
					t.Fatalf("%s append %d: %s\nstderr:\n%s", mode, at, res, res.stderr)
				}
				// The workload has fewer appends: every point was tried.
				t.Logf("%s: %d kill points", mode, at-1)
				if at < 8 {
					t.Errorf("%s: only %d kill points: the workload did not run", mode, at-1)
				}
				break
			}
			var final childResult
			for range 3 {
				final = runChild(t, "delegate", dir, srv.URL(), childSpec{kind: "fresh"})
				if !final.killed && final.exit == 0 {
					break
				}
			}
			if final.killed || final.exit != 0 {
				t.Fatalf("%s append %d (%s): no fresh child finished: %s\nstderr:\n%s", mode, at, res.selfKill(), final, final.stderr)
			}
			checkDelegateLedgers(t, dir, fmt.Sprintf("%s append %d (%s)", mode, at, res.selfKill()))
		}
	}
}

func checkDelegateLedgers(t *testing.T, dir, point string) {
	t.Helper()
	store, err := file.Open(filepath.Join(dir, "ledger"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pe := hosttest.Load(t, store, delegateSession)
	var call string
	results, ends := 0, 0
	for _, e := range pe {
		if e.Step != nil && len(e.Step.ToolCalls) > 0 && call == "" {
			call = e.Step.ToolCalls[0].ID
		}
		if r := e.ToolResult; r != nil {
			results++
			if r.IsError || !strings.Contains(r.Output, "charge") {
				t.Errorf("%s: the parent's call got %q (error %v)", point, r.Output, r.IsError)
			}
		}
		if e.RunEnd != nil && e.RunEnd.Status != ledger.RunInterrupted {
			ends++
			if e.RunEnd.Status != ledger.RunCompleted {
				t.Errorf("%s: the parent's run ended %s: %s", point, e.RunEnd.Status, e.RunEnd.Reason)
			}
		}
	}
	if n := hosttest.CountKind(pe, ledger.KindInput); n != 1 || results != 1 || ends != 1 {
		t.Fatalf("%s: parent: %d messages, %d results, %d ends; want 1 each: %s", point, n, results, ends, hosttest.Kinds(pe))
	}
	ce := hosttest.Load(t, store, host.ChildSessionID(delegateSession, call))
	if n, m := hosttest.CountKind(ce, ledger.KindInput), hosttest.CountKind(ce, ledger.KindRunStart); n != 1 || m != 1 {
		t.Fatalf("%s: child: %d messages, %d runs; want 1 and 1: %s", point, n, m, hosttest.Kinds(ce))
	}
	b, err := os.ReadFile(filepath.Join(dir, chargeLog))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 1 {
		t.Errorf("%s: charge ran %d times:\n%s", point, n, b)
	}
}

// delegateChild is the child process of TestDelegateCrashPoints: it
// boots (its sweep resumes what a killed process left), then sends the
// workload's message unless the ledger holds it, and waits for its
// answer (the same request id: a message sent before is waited for).
func delegateChild(t *testing.T) {
	dir := filepath.Join(os.Getenv(envCrashDir), "ledger")
	log := childLogger()
	fs, err := file.Open(dir, file.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	store := &killStore{Store: fs, dir: dir, at: envInt(envKillAppend), mode: os.Getenv(envKillMode)}
	client, err := provider.New(provider.Config{BaseURL: os.Getenv(envCrashURL), APIKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	researcher := host.Agent{Name: "researcher", Model: "fake/echo",
		Tools:         crashTools(filepath.Join(os.Getenv(envCrashDir), chargeLog), 0),
		ToolApprovals: map[string]host.ApprovalMode{"charge": host.ApproveAlways}}
	tool, err := host.NewDelegateTool(host.Delegate{Agent: researcher})
	if err != nil {
		t.Fatal(err)
	}
	lead := host.Agent{Name: "lead", Model: "fake/echo", Tools: []host.Tool{tool}}
	h := hosttest.New(t, host.Options{Storage: store, Model: client, Agent: lead, Logger: log,
		Retry: model.RetryPolicy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		AutoResume: &host.AutoResume{MaxAttempts: 10, AgentFor: func(_ context.Context, id string) (host.Agent, error) {
			if strings.Contains(id, ".") {
				return researcher, nil
			}
			return lead, nil
		}}}).Host
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := h.Session(delegateSession).Send(ctx, delegateText, host.SendOptions{RequestID: delegateReq})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("send: %+v %v", res, err)
	}
}
