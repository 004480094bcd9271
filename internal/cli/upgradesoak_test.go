package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
)

// The upgrade soak (make upgrade-soak): a rolling deploy under the soak's
// load.
const (
	// upgradeEnv runs TestUpgradeSoak for a duration ("3m").
	upgradeEnv = "AGENTIC_UPGRADE_SOAK"
	// upgradeOldEnv names the previous release's binary.
	upgradeOldEnv = "AGENTIC_UPGRADE_OLD"
	// upgradeOldFeaturesEnv, when set, is the ledger_features the old
	// hosts announce ("[]": none), for a previous release that reads what
	// this one does (the first release has no older one to meet).
	upgradeOldFeaturesEnv = "AGENTIC_UPGRADE_OLD_FEATURES"
)

// upgradeSoak is one upgrade soak: the soak, which build each host slot
// runs, and the forks its forker asked for.
type upgradeSoak struct {
	*soak
	old, cur string   // the two binaries
	oldArgs  []string // the old hosts' extra arguments
	builds   []string // by slot: "old" or "new" (under soak.mu)
	replaced atomic.Int64

	forkMu    sync.Mutex
	forks     []string     // the fork sessions answered 202
	tried     []string     // every fork session asked for
	refused   atomic.Int64 // forks refused: feature_unavailable
	unsettled atomic.Int64 // forks refused: the point was not settled
	sessions  int
}

// TestUpgradeSoak is make upgrade-soak: four serve processes on a Redis
// Cluster, two of the previous release (AGENTIC_UPGRADE_OLD) and two of
// this one, under the soak's load (messages, read and external tools,
// approvals, viewers) while sessions use the ledger features (forks, edit
// decisions). Over the soak, the old hosts are replaced one by one by new
// ones (SIGTERM, then the other build on the same slot), then two new ones
// by old ones: a deploy and its rollback. Every accepted message must be
// answered exactly once, every fork accepted must be answered, nothing
// accepted refused, and every host must stop cleanly.
func TestUpgradeSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(upgradeEnv))
	if err != nil {
		t.Skipf("set %s to a duration (make upgrade-soak sets it) to run the upgrade soak", upgradeEnv)
	}
	old := os.Getenv(upgradeOldEnv)
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("%s must name the previous release's binary (make upgrade-soak builds it): %v", upgradeOldEnv, err)
	}
	u := &upgradeSoak{old: old, cur: needBinary(t), builds: []string{"old", "old", "new", "new"}, sessions: 16}
	if f := os.Getenv(upgradeOldFeaturesEnv); f != "" {
		u.oldArgs = []string{"--set", "ledger_features=" + f}
	}
	u.soak = &soak{t: t, bin: u.cur, accepted: map[string]acceptedMsg{}, decisions: map[string]int{}, edits: true,
		http:  &http.Client{Timeout: 8 * time.Second},
		posts: &postCounter{byTitle: map[string]map[string]bool{}}}
	u.binOf = func(i int) (string, []string) {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.builds[i] == "old" {
			return u.old, u.oldArgs
		}
		return u.cur, nil
	}
	u.cluster = redistest.StartClusterWith(t, redistest.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second,
		AppendOnly: true, Args: []string{"--cluster-require-full-coverage", "no"}})
	u.setup(len(u.builds))
	runSoak(t, u.soak, d, u.deploy)
	u.checkForks()
	fmt.Printf("upgrade soak: %d hosts replaced; forks: %d answered 202, %d refused (feature_unavailable), %d refused (no settled point); edit decisions: %d accepted, %d refused (feature_unavailable)\n",
		u.replaced.Load(), len(u.forks), u.refused.Load(), u.unsettled.Load(), u.edited.Load(), u.editsRefused.Load())
	if len(u.forks) == 0 || u.edited.Load() == 0 {
		t.Errorf("the soak used no fork (%d) or no edit (%d): the features were never written", len(u.forks), u.edited.Load())
	}
	if u.oldArgs != nil && u.refused.Load()+u.editsRefused.Load() == 0 {
		t.Errorf("no fork or edit was refused while hosts that do not read them lived")
	}
}

// deploy replaces hosts while the clients post: slot 0 then 1 from the old
// build to the new (all four new then), then 0 and 1 back to the old; the
// forker asks for forks meanwhile.
func (u *upgradeSoak) deploy(ctx context.Context, d time.Duration) {
	var forker sync.WaitGroup
	forker.Go(func() { u.forker(ctx) })
	defer forker.Wait()
	steps := []struct {
		slot  int
		build string
	}{{0, "new"}, {1, "new"}, {0, "old"}, {1, "old"}}
	every := d / time.Duration(len(steps)+1)
	for _, st := range steps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		u.replace(st.slot, st.build)
	}
}

// replace stops slot i's host as a deploy does (SIGTERM: its runs stop at
// a step boundary, resumable), then starts the other build there.
func (u *upgradeSoak) replace(i int, build string) {
	u.mu.Lock()
	h := u.hosts[i]
	u.hosts[i] = nil
	u.mu.Unlock()
	if h != nil {
		h.signal(syscall.SIGTERM)
		if code := h.wait(60 * time.Second); code != 0 {
			u.violate("%s exited %d on SIGTERM: %s", h.name, code, h.err.String())
		}
	}
	u.mu.Lock()
	from := u.builds[i]
	u.builds[i] = build
	u.mu.Unlock()
	n := u.startHost(i)
	u.mu.Lock()
	u.hosts[i] = n
	u.mu.Unlock()
	u.replaced.Add(1)
	u.t.Logf("deploy: h%d replaced, %s build → %s build", i, from, build)
}

// forker forks a random session at a settled message (not one that asks
// for a post: a fork would publish it again, under a call id of its own)
// every second or so, through a random host.
func (u *upgradeSoak) forker(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		time.Sleep(time.Duration(700+rand.IntN(600)) * time.Millisecond)
		h := u.pick()
		if h == nil {
			continue
		}
		session := fmt.Sprintf("soak-%d", rand.IntN(u.sessions))
		code, b := u.call(ctx, h, "GET", "/v1/sessions/"+session+"/transcript", "")
		var tr wireTranscript
		if code != http.StatusOK || json.Unmarshal(b, &tr) != nil {
			continue
		}
		var points []string
		for i, it := range tr.Items {
			// A message that started its run (not one queued into a run
			// in flight), answered.
			if it.Kind == "user" && !strings.HasPrefix(it.Text, "publish_post") && (i == 0 || tr.Items[i-1].RunID != it.RunID) && i+1 < len(tr.Items) &&
				tr.Items[i+1].Kind == "response" && tr.Items[i+1].Status == "completed" {
				points = append(points, it.ID)
			}
		}
		if len(points) == 0 {
			continue
		}
		id := fmt.Sprintf("fork-%d", n)
		u.forkMu.Lock()
		u.tried = append(u.tried, id)
		u.forkMu.Unlock()
		code, b = u.call(ctx, h, "POST", "/v1/sessions/"+session+"/fork", fmt.Sprintf(`{"at":%q,"session_id":%q}`, points[rand.IntN(len(points))], id))
		switch {
		case code == http.StatusAccepted:
			u.forkMu.Lock()
			u.forks = append(u.forks, id)
			u.forkMu.Unlock()
		case code == http.StatusConflict && strings.Contains(string(b), `"feature_unavailable"`):
			if u.refused.Add(1)%10 == 1 {
				u.t.Logf("fork refused on %s: %s", h.name, b)
			}
		case code == http.StatusConflict && strings.Contains(string(b), `"code":"conflict"`):
			// The point was no settled message after all (one queued
			// into a run in flight also has a response after it): the
			// fork is refused, nothing written.
			u.unsettled.Add(1)
		case code == 0 || code >= 500 || code == http.StatusTooManyRequests:
			// A host stopping, or the storage failing over: whatever
			// the ledger holds is checked below.
		default:
			u.violate("fork of %s at %s on %s: %d %s", session, id, h.name, code, b)
		}
	}
}

// checkForks waits (up to 90 s) for every fork session that holds events
// to have answered all it holds, and checks that every fork answered 202
// holds events.
func (u *upgradeSoak) checkForks() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, id := range u.tried {
		for {
			evs, err := u.store().Load(ctx, id)
			switch {
			case err != nil:
				u.violate("load fork %s: %v", id, err)
			case len(evs) == 0:
				if slices.Contains(u.forks, id) {
					u.violate("fork %s was answered 202 and holds no event", id)
				}
			case ledger.OpenRuns(evs) == nil && ledger.PendingInputs(evs) == nil:
				if last := evs[len(evs)-1]; last.RunEnd == nil || last.RunEnd.Status != ledger.RunCompleted {
					u.violate("fork %s ended with %+v", id, last)
				}
			default:
				if ctx.Err() == nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				u.violate("fork %s was not answered within 90s of the end", id)
			}
			break
		}
	}
}
