package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage/redis"
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
