package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage/redis"
)

// TestWatchesLeaveCommandsTheirPool: watches wait on connections of their
// own, so that a host following many sessions still appends: with a
// command pool of one connection and watches that block for a minute,
// every append and every watch's wake-up still goes through (before the
// watches had a pool of their own, the first watch held the one connection
// and the appends failed with a pool timeout).
func TestWatchesLeaveCommandsTheirPool(t *testing.T) {
	t.Parallel()
	for name, url := range watchURLs() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, addrs := url(t)
			opts := redis.Options{Prefix: freshPrefix(), WatchBlock: time.Minute}
			st := open(t, u+"?pool_size=1", opts)
			ctx := t.Context()
			const n = 12 // on a cluster, every node serves some
			var chs []<-chan struct{}
			for i := range n {
				ch, err := st.Watch(ctx, fmt.Sprintf("w%d", i))
				if err != nil {
					t.Fatal(err)
				}
				chs = append(chs, ch)
			}
			waitBlocked(t, addrs, n)
			for i := range n {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := st.Append(actx, fmt.Sprintf("w%d", i), poke(fmt.Sprintf("w%d", i), 0))
				cancel()
				if err != nil {
					t.Fatalf("append %d beside %d blocked watches: %v", i, n, err)
				}
			}
			for _, ch := range chs {
				waitFire(t, ch)
			}
		})
	}
}

// watchURLs are the topologies of the watch tests: each gives the URL
// and the servers' addresses.
func watchURLs() map[string]func(t *testing.T) (string, []string) {
	return map[string]func(t *testing.T) (string, []string){
		"single": func(t *testing.T) (string, []string) {
			srv := redistest.Start(t, redistest.Options{})
			return srv.URL(), []string{srv.Addr()}
		},
		"cluster": func(t *testing.T) (string, []string) {
			if testing.Short() {
				t.Skip("starts a 3-node cluster")
			}
			c := redistest.StartCluster(t, 3)
			return clusterURL(c), c.Addrs()
		},
	}
}

// waitBlocked waits until the servers at addrs have n clients blocked
// (INFO clients, blocked_clients), the watches' XREADs.
func waitBlocked(t *testing.T, addrs []string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		blocked := 0
		for _, a := range addrs {
			c := goredis.NewClient(&goredis.Options{Addr: a})
			info, err := c.Info(t.Context(), "clients").Result()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(info) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
					k, _ := strconv.Atoi(v)
					blocked += k
				}
			}
		}
		if blocked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clients blocked after 30s, want %d watches", blocked, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndedWatchReleasesItsConnection: a watch whose ctx ended gives its
// connection back at once, not when its XREAD BLOCK times out: with a
// watch pool of one connection and a block of a minute, a second watch
// after the first one ended still fires.
func TestEndedWatchReleasesItsConnection(t *testing.T) {
	t.Parallel()
	for name, url := range watchURLs() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, _ := url(t)
			opts := redis.Options{Prefix: freshPrefix(), WatchBlock: time.Minute}
			// On a cluster the pool is a node's: the watches follow one
			// session, so that each waits on the same node.
			st := open(t, u+"?watch_pool_size=1", opts)
			ctx := t.Context()
			for i := range 3 {
				wctx, cancel := context.WithCancel(ctx)
				ch, err := st.Watch(wctx, "e")
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Append(ctx, "e", poke("e", i)); err != nil {
					t.Fatal(err)
				}
				waitFire(t, ch)
				cancel()
			}
		})
	}
}
