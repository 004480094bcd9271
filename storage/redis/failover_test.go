package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
	"github.com/agentichost/agentic/storage/storagetest"
	goredis "github.com/redis/go-redis/v9"
)

// TestClusterFailover: a Store on a cluster of three primaries with a
// replica each. The primary of a session's slot is killed: appends through
// the session's lease fail while its replica takes over, then go on there,
// with every event acknowledged before the kill kept once and the lease
// still the holder's. The killed node, restarted from its append-only file,
// comes back as a replica.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node cluster")
	}
	t.Parallel()
	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: 500 * time.Millisecond, AppendOnly: true})
	s := open(t, clusterURL(c), redis.Options{ReadTimeout: 500 * time.Millisecond, MaxRetries: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lease, err := s.AcquireLease(ctx, "s1", "host-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	input := func() ledger.Event {
		return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(), RunID: "run_1",
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: []ledger.Part{ledger.TextPart("m")}}}
	}
	var acked []string
	for range 5 {
		e := input()
		if err := lease.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, e.ID)
	}

	raw := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	defer raw.Close()
	primary, err := raw.MasterForKey(ctx, "agentic:{default:s1}:events")
	if err != nil {
		t.Fatal(err)
	}
	var victim *redistest.Server
	for _, n := range c.Nodes {
		if n.Addr() == primary.Options().Addr {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("no node at %s", primary.Options().Addr)
	}
	time.Sleep(50 * time.Millisecond) // the replica has what was acknowledged
	victim.Kill()
	killed := time.Now()

	failures := 0
	for len(acked) < 10 {
		e := input()
		err := lease.Append(ctx, e)
		if err == nil {
			acked = append(acked, e.ID)
			continue
		}
		failures++
		if ctx.Err() != nil {
			t.Fatalf("appends did not resume after the failover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("appends failed for %v (%d failures) while the replica took over", time.Since(killed).Round(time.Millisecond), failures)
	if err := lease.Renew(ctx); err != nil {
		t.Errorf("the lease after the failover: %v", err)
	}
	evs, err := s.Load(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range evs {
		seen[e.ID]++
	}
	for _, id := range acked {
		if seen[id] != 1 {
			t.Errorf("event %s, acknowledged, is in the stream %d times", id, seen[id])
		}
	}
	victim.Restart()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if reply, err := victim.Do("ROLE"); err != nil || reply != "*5" {
		t.Errorf("the restarted node's ROLE: %q %v, want a replica's", reply, err)
	}
	if err := lease.Append(ctx, input()); err != nil {
		t.Errorf("an append after the old primary came back: %v", err)
	}
}

// TestWaitReplicas: with wait_replicas=1, an append returns once a replica
// has it; with the replica stopped, it fails with ErrNotReplicated within
// wait_timeout (and goes through once the replica is back). On a cluster
// with a replica per primary, the lease's appends wait the same way.
func TestWaitReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts replicas")
	}
	t.Parallel()
	primary, replica := startReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := open(t, primary.URL()+"?wait_replicas=1&wait_timeout=300ms", redis.Options{Prefix: freshPrefix()})
	e := func() ledger.Event {
		return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(),
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: []ledger.Part{ledger.TextPart("m")}}}
	}
	if err := s.Append(ctx, "w", e()); err != nil {
		t.Fatalf("an append a replica acknowledges: %v", err)
	}
	replica.Pause()
	start := time.Now()
	err := s.Append(ctx, "w", e())
	if !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("an append with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the append failed after %v, not within its wait_timeout", took)
	}
	// The soak's case: a message whose append was not acknowledged by
	// the replica in time has landed; the client's retry, another message
	// under the same request id, is refused naming it.
	first := e()
	first.Input.RequestID = "req-doubt"
	if err := s.AppendRequest(ctx, "w", "req-doubt", first); !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("AppendRequest with the replica stopped: %v, want ErrNotReplicated", err)
	}
	retry := e()
	retry.Input.RequestID = "req-doubt"
	if seen, ok := errors.AsType[*storage.RequestSeenError](s.AppendRequest(ctx, "w", "req-doubt", retry)); !ok || seen.MessageID != first.Input.MessageID {
		t.Fatalf("the retry of an append in doubt: %v, want a RequestSeenError naming %s", seen, first.Input.MessageID)
	}
	replica.Resume()
	for {
		err := s.Append(ctx, "w", e())
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("appends after the replica came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	c := redistest.StartClusterWith(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	cs := open(t, clusterURL(c)+"?wait_replicas=1", redis.Options{Prefix: freshPrefix()})
	lease, err := cs.AcquireLease(ctx, "w", "host-a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := lease.Append(ctx, e()); err != nil {
			t.Fatalf("a lease's append on a cluster with replicas: %v", err)
		}
	}
	evs, err := cs.Load(ctx, "w")
	if err != nil || len(evs) != 3 {
		t.Fatalf("load: %d events, %v", len(evs), err)
	}
}

// startReplicated starts a server and a replica of it, and waits until the
// replica is in sync.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t, redistest.Options{})
	replica = redistest.Start(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}})
	raw := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	defer raw.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if v, err := raw.Info(t.Context(), "replication").Result(); err == nil && strings.Contains(v, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never synced")
		}
	}
}

// TestConformanceReplicated: a store that waits for a replica on every
// append passes the conformance suite.
func TestConformanceReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a replica")
	}
	t.Parallel()
	primary, _ := startReplicated(t)
	storagetest.RunShared(t, func(t *testing.T) (storage.Storage, storage.Storage) {
		opts := redis.Options{Prefix: freshPrefix(), Replicas: 1}
		return open(t, primary.URL(), opts), open(t, primary.URL(), opts)
	})
}
