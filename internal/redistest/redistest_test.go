package redistest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestStartKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{AppendOnly: true, AppendFsync: "always"})
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") || !strings.HasSuffix(s.URL(), "/0") {
		t.Errorf("URL() = %q", s.URL())
	}
	if got, err := s.Do("SET", "k", "v"); err != nil || got != "+OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	if got, _ := s.Do("CONFIG", "GET", "save"); got != "*2" {
		t.Errorf("CONFIG GET save = %q", got)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("the server answers after Kill")
	}
	s.Restart()
	if got, err := s.Do("GET", "k"); err != nil || got != "$1" {
		t.Errorf("GET after a restart from the append-only file = %q, %v; want the value", got, err)
	}
	s.Stop()
	s.Restart()
	if got, err := s.Do("PING"); err != nil || got != "+PONG" {
		t.Errorf("PING after Stop and Restart = %q, %v", got, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Error("a paused server answered")
	}
	s.Resume()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}
	s.Pause() // the cleanup must stop a paused server too
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	for _, fromGo := range []bool{false, true} {
		name := "redis-cli"
		if fromGo {
			name = "go"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, ClusterOptions{Masters: 3}, fromGo)
			cl := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
			defer cl.Close()
			ctx := t.Context()
			// Keys in every slot range work.
			for i := range 30 {
				k := "key-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
				if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
			}
			var masters atomic.Int32
			err := cl.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
				masters.Add(1)
				return nil
			})
			if err != nil || masters.Load() != 3 {
				t.Errorf("ForEachMaster: %d masters, %v; want 3", masters.Load(), err)
			}
		})
	}
}

// TestClusterFailover: a cluster of three masters with a replica each; a
// master killed is replaced by its replica, writes go on through the
// cluster client, and the killed node, restarted from its append-only
// file, comes back as a replica.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	c := StartClusterWith(t, ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: 500 * time.Millisecond, AppendOnly: true})
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	if p := c.Primaries(); len(p) != 3 || p[0] != c.Nodes[0] || p[1] != c.Nodes[1] || p[2] != c.Nodes[2] {
		t.Fatalf("primaries %v, want the first three nodes", p)
	}
	// go-redis routes a dead master's slots to it until it reloads the
	// cluster's state (every 60s by default): reload it often.
	cl := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: 500 * time.Millisecond})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := cl.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	victim, err := cl.MasterForKey(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: on a loaded machine the replica may not
	// have the key yet when its master dies, and the failover loses it.
	// Wait for the replica to hold it first.
	if n, err := victim.Do(ctx, "WAIT", 1, 10_000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1: %d replicas have the key (%v)", n, err)
	}
	var killed *Server
	for _, s := range c.Nodes {
		if s.Addr() == victim.Options().Addr {
			killed = s
		}
	}
	killed.Kill()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if p := c.Primaries(); len(p) != 3 || slices.Contains(p, killed) {
		t.Fatalf("primaries after the kill: %v", p)
	}
	for {
		v, err := cl.Get(ctx, "k").Result()
		if err == nil && v == "before" && cl.Set(ctx, "k", "after", 0).Err() == nil {
			break
		}
		if errors.Is(err, goredis.Nil) {
			t.Fatal("the failover lost the key its replica had")
		}
		if ctx.Err() != nil {
			t.Fatalf("the cluster client did not ride through the failover: %q %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed.Restart()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if reply, err := killed.Do("ROLE"); err != nil || reply != "*5" {
		t.Errorf("the restarted node's ROLE: %q %v, want a replica's", reply, err)
	}
}

// TestMissingRedis runs a test that needs Redis with an empty PATH: it is
// skipped, or fails under AGENTIC_REQUIRE_REDIS=1, saying why.
func TestMissingRedis(t *testing.T) {
	if os.Getenv("PATH") == "" {
		t.Skip("in the subprocess")
	}
	for _, require := range []string{"", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPauseResume$", "-test.count=1", "-test.v")
		cmd.Env = []string{"PATH=", RequireEnv + "=" + require}
		out, err := cmd.CombinedOutput()
		want, wantErr := "--- SKIP: TestPauseResume", false
		if require == "1" {
			want, wantErr = "--- FAIL: TestPauseResume", true
		}
		if (err != nil) != wantErr || !strings.Contains(string(out), want) ||
			!strings.Contains(string(out), "redis-server is not on PATH") {
			t.Errorf("%s=%q without redis-server: %v, want %q and the reason:\n%s", RequireEnv, require, err, want, out)
		}
	}
}
