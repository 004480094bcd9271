package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// slowStore is a memory store whose writes of one kind take a while: the
// inbox's values (slowKV), or the ledger's approval requests (slowRequest).
type slowStore struct {
	*memory.Store
	slowKV, slowRequest time.Duration
	requesting          atomic.Bool // an approval request's append is under way
}

func (s *slowStore) Set(ctx context.Context, ns, key string, value []byte) error {
	if strings.HasPrefix(ns, "approvals:") {
		time.Sleep(s.slowKV)
	}
	return s.Store.Set(ctx, ns, key, value)
}

func (s *slowStore) Append(ctx context.Context, id string, events ...ledger.Event) error {
	for _, e := range events {
		if e.ApprovalRequest != nil {
			s.requesting.Store(true)
			time.Sleep(s.slowRequest)
			defer s.requesting.Store(false)
		}
	}
	return s.Store.Append(ctx, id, events...)
}

// TestInboxNeverLagsTheState: whoever sees a session waiting for approval
// (its status, read from the ledger) finds the request in the inbox at that
// moment — even when the inbox's write is slow; and a listing made while
// the request's append is still under way keeps its inbox entry, so the
// request is listed once the append is done.
func TestInboxNeverLagsTheState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store *slowStore
	}{
		{"slow-inbox", &slowStore{Store: memory.New(), slowKV: 200 * time.Millisecond}},
		{"slow-ledger", &slowStore{Store: memory.New(), slowRequest: 200 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var published atomic.Int64
			hs := approvalHost(t, tc.store, host.Agent{Tools: []host.Tool{publishTool(&published)}},
				hosttest.ToolCall{Name: "publish", Arguments: `{"title":"Hi"}`})
			done := make(chan host.RunResult, 1)
			go func() {
				res, err := hs.Host.Session("s").Send(ctx, "publish it", host.SendOptions{})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			checks, during := 0, 0
			for {
				if tc.store.requesting.Load() {
					// The request is on its way: a listing now must
					// not drop its entry.
					if _, err := hs.Host.PendingApprovals(ctx); err != nil {
						t.Fatal(err)
					}
					during++
				}
				st, err := hs.Host.Session("s").Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.State == host.StateApprovalRequired {
					inbox, err := hs.Host.PendingApprovals(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(inbox) != 1 || len(st.Approvals) != 1 || inbox[0].ApprovalID != st.Approvals[0].ApprovalID {
						t.Fatalf("the session waits for approval %+v, the inbox lists %+v", st.Approvals, inbox)
					}
					checks++
					if checks == 20 {
						break
					}
				}
				time.Sleep(time.Millisecond)
			}
			res := <-done
			if res.Status != ledger.RunApprovalRequired {
				t.Fatalf("the run: %+v", res)
			}
			if tc.store.slowRequest > 0 && during == 0 {
				t.Fatal("no listing ran while the request was on its way")
			}
		})
	}
}

// TestInboxDropsWhatWasNeverRecorded: an inbox entry whose request its
// ledger does not hold is kept while the request may be on its way, and
// removed once it is older than that (its host died between the two
// writes).
func TestInboxDropsWhatWasNeverRecorded(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	hs := approvalHost(t, store, host.Agent{})
	if _, err := hs.Host.Session("s").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	entry := func(id string, at time.Time) {
		b, _ := json.Marshal(host.PendingApproval{SessionID: "s", ApprovalID: id, Tool: "publish", RequestedAt: at})
		if err := store.Set(ctx, "approvals:", "s/"+id, b); err != nil {
			t.Fatal(err)
		}
	}
	entry("appr_recent", time.Now())
	entry("appr_old", time.Now().Add(-time.Hour))
	inbox, err := hs.Host.PendingApprovals(ctx)
	if err != nil || len(inbox) != 0 {
		t.Fatalf("inbox %+v %v: a request no ledger holds is not listed", inbox, err)
	}
	keys, err := store.Keys(ctx, "approvals:")
	if err != nil || len(keys) != 1 || keys[0] != "s/appr_recent" {
		t.Fatalf("inbox keys %v %v, want the recent entry kept and the old one removed", keys, err)
	}
}
