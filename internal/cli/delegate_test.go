//go:build unix

package cli_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// delegateConfig is acme's agents: default hands tasks to researcher.
const delegateConfig = `    agents:
      default:
        delegate_to: [researcher]
      researcher:
        description: Looks things up.
lease_ttl: 2s
`

// TestServeDelegateSurvivesSIGKILL: serve SIGKILLed while a sub-agent's
// child run streams; the next host (on files, the next process at boot;
// on Redis, the other host once the lease lapsed) resumes both, the child
// first: the parent's call, made again, finds the child run it started —
// one message and one run in the child session, no second child — and the
// parent is answered once, with the child's answer.
func TestServeDelegateSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	for _, topo := range []string{"file", "redis"} {
		t.Run(topo, func(t *testing.T) {
			t.Parallel()
			model := slowModel(t)
			var url string
			var store storage.Storage
			if topo == "file" {
				dir := t.TempDir()
				url, store = "file:"+dir, fileLedger(t, dir)
			} else {
				rds := redistest.Start(t, redistest.Options{})
				url, store = rds.URL(), tenantLedger(t, rds.URL())
			}
			config := writeServeConfig(t, url, model.URL(), delegateConfig)
			a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
			var b *serveProc
			if topo == "redis" {
				b = startServe(t, "B", bin, config, "--set", "host_id=host-b")
			}
			task := words("w", 150)
			a.post("boss", `ask the researcher task="`+task+`"`)
			// The parent's step names the call; its child session is a
			// function of it.
			pe := hosttest.WaitLedger(t, store, "boss", 20*time.Second, "the parent's call", func(ev []ledger.Event) bool {
				return hosttest.CountKind(ev, ledger.KindStep) > 0
			})
			var callID string
			for _, e := range pe {
				if e.Step != nil && len(e.Step.ToolCalls) > 0 {
					callID = e.Step.ToolCalls[0].ID
				}
			}
			if callID == "" {
				t.Fatalf("the parent called no tool: %s", hosttest.Kinds(pe))
			}
			child := host.ChildSessionID("boss", callID)
			hosttest.WaitLedger(t, store, child, 20*time.Second, "the child's run", func(ev []ledger.Event) bool {
				return hosttest.CountKind(ev, ledger.KindRunStart) > 0
			})
			onA := a.viewer(child)
			onA.read(20*time.Second, "the child's reply streaming", func(sseEvent) bool { return onA.startsWith("You said: w0 w1") })
			a.signal(syscall.SIGKILL)
			a.wait(10 * time.Second)
			if b == nil {
				b = startServe(t, "A2", bin, config, "--set", "host_id=host-a2")
			}
			pe = hosttest.WaitLedger(t, store, "boss", 60*time.Second, "the parent's answer", func(ev []ledger.Event) bool {
				return hosttest.Settled(ev) && hosttest.CountKind(ev, ledger.KindRunEnd) > 0
			})
			ce := hosttest.Load(t, store, child)
			if n, m := hosttest.CountKind(ce, ledger.KindInput), hosttest.CountKind(ce, ledger.KindRunStart); n != 1 || m != 1 {
				t.Fatalf("child: %d messages, %d runs; want 1 and 1: %s", n, m, hosttest.Kinds(ce))
			}
			for _, e := range ce {
				if in := e.Input; in != nil && (in.Parent == nil || in.Parent.SessionID != "boss" || in.Parent.CallID != callID) {
					t.Errorf("the child's message names parent %+v", in.Parent)
				}
				if e.RunEnd != nil && e.RunEnd.Status != ledger.RunCompleted {
					t.Errorf("child run ended %s: %s", e.RunEnd.Status, e.RunEnd.Reason)
				}
			}
			if n := hosttest.CountKind(ce, ledger.KindRunEnd); n != 1 {
				t.Errorf("child: %d run-ends, want 1: %s", n, hosttest.Kinds(ce))
			}
			results, ends := 0, 0
			for _, e := range pe {
				if r := e.ToolResult; r != nil {
					results++
					if r.IsError || !strings.HasPrefix(r.Output, "You said: "+task) || r.Source != "agent:researcher/"+child {
						t.Errorf("the parent's call got %q (error %v, source %q)", r.Output, r.IsError, r.Source)
					}
				}
				if e.RunEnd != nil {
					ends++
					if e.RunEnd.Status != ledger.RunCompleted {
						t.Errorf("parent ended %s: %s", e.RunEnd.Status, e.RunEnd.Reason)
					}
				}
			}
			if results != 1 || ends != 1 || hosttest.CountKind(pe, ledger.KindInput) != 1 {
				t.Fatalf("parent: %d results, %d run-ends: %s; want one message answered once", results, ends, hosttest.Kinds(pe))
			}
			b.signal(syscall.SIGTERM)
			b.wait(20 * time.Second)
		})
	}
}
