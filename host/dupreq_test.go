//go:build unix

package host_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
)

// TestSameRequestTwoHostsAtOnce: the same message (one RequestID) sent to
// two hosts on one Redis at the same moment — a client that retries on
// another host before the first answered — is appended once (the store
// checks the request id in the same step as the write: neither host need
// see the other's append first) and answered once: one run, the
// transcript shows it once, and both senders get the same message's one
// answer. Before, both hosts could append it, the second copy an alias of
// the first (ledger.Aliases); earlier still, answered by a second run.
func TestSameRequestTwoHostsAtOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	model := mhModel(t, fakemodel.Options{Latency: 20 * time.Millisecond})
	a := mhHost(t, mhOpen(t, rs.URL()), "A", model.URL())
	b := mhHost(t, mhOpen(t, rs.URL()), "B", model.URL())
	for i := range 20 {
		session := "dup" + string(rune('a'+i))
		var wg sync.WaitGroup
		res := make([]host.RunResult, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		for j, h := range []*host.Host{a, b} {
			wg.Go(func() {
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res[j], errs[j] = h.Session(session).Send(ctx, "hello once", host.SendOptions{RequestID: "req-1"})
			})
		}
		close(start)
		wg.Wait()
		events, err := mhOpen(t, rs.URL()).Load(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		if ids := requestInputs(events, "req-1"); len(ids) != 1 {
			t.Fatalf("%s: the message was appended %d times (%v), want once", session, len(ids), ids)
		}
		runs := 0
		for _, e := range events {
			if e.RunStart != nil {
				runs++
			}
		}
		users := 0
		for _, it := range ledger.ProjectSession(session, events).Items {
			if it.Kind == ledger.ItemUser {
				users++
			}
		}
		if users != 1 || runs != 1 || len(ledger.PendingInputs(events)) != 0 || errs[0] != nil || errs[1] != nil || res[0].MessageID != res[1].MessageID || res[0].Status != ledger.RunCompleted || res[1].Status != ledger.RunCompleted {
			t.Fatalf("%s: %d user messages shown, %d runs; results %+v %v / %+v %v", session, users, runs, res[0], errs[0], res[1], errs[1])
		}
	}
}
