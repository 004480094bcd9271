package redis_test

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
	"github.com/agentichost/agentic/storage/storagetest"
)

// prefixes numbers the prefixes of the stores a test opens on one server,
// so that each starts empty.
var prefixes atomic.Int64

func freshPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// open opens a Store on url, closed when the test ends.
func open(t testing.TB, url string, opts redis.Options) *redis.Store {
	t.Helper()
	s, err := redis.Open(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clusterURL returns the redis+cluster URL of a cluster.
func clusterURL(c *redistest.Cluster) string {
	return "redis+cluster://" + strings.Join(c.Addrs(), ",")
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		return open(t, srv.URL(), redis.Options{Prefix: freshPrefix()})
	})
}

func TestConformanceShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	storagetest.RunShared(t, func(t *testing.T) (storage.Storage, storage.Storage) {
		opts := redis.Options{Prefix: freshPrefix()}
		return open(t, srv.URL(), opts), open(t, srv.URL(), opts)
	})
}

// TestConformancePrefixed: a tenant's prefixed view of a shared store is a
// shared store too, leases and watches included.
func TestConformancePrefixed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	view := func(t *testing.T, s storage.Storage) storage.Storage {
		p, err := storage.Prefix(s, "tenant-a:")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.(storage.Leaser); !ok {
			t.Fatal("the view of a Redis store has no leases")
		}
		return p
	}
	storagetest.RunShared(t, func(t *testing.T) (storage.Storage, storage.Storage) {
		opts := redis.Options{Prefix: freshPrefix()}
		return view(t, open(t, srv.URL(), opts)), view(t, open(t, srv.URL(), opts))
	})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	url := clusterURL(c)
	t.Run("Run", func(t *testing.T) {
		storagetest.Run(t, func(t *testing.T) storage.Storage {
			return open(t, url, redis.Options{Prefix: freshPrefix()})
		})
	})
	t.Run("IndexOnce", func(t *testing.T) {
		// In a cluster the index lives in another slot than the session:
		// Append adds the session to it before its first batch only, and
		// after a deletion again, even one by another Store, which this
		// one does not know of; every other batch takes one round trip.
		ctx := t.Context()
		prefix := freshPrefix()
		st := open(t, url, redis.Options{Prefix: prefix})
		other := open(t, url, redis.Options{Prefix: prefix})
		zadds := func() int {
			n := 0
			for _, node := range c.Nodes {
				raw := rawClient(t, node.Addr())
				stats, err := raw.Info(ctx, "commandstats").Result()
				if err != nil {
					t.Fatal(err)
				}
				for line := range strings.SplitSeq(stats, "\n") {
					if rest, ok := strings.CutPrefix(line, "cmdstat_zadd:calls="); ok {
						var calls int
						fmt.Sscanf(rest, "%d", &calls)
						n += calls
					}
				}
			}
			return n
		}
		before := zadds()
		for i := range 3 {
			if err := st.Append(ctx, "once", pokes("once", i, 1)...); err != nil {
				t.Fatal(err)
			}
		}
		if n := zadds() - before; n != 1 {
			t.Errorf("%d ZADDs for three batches of one session, want 1 (before its first)", n)
		}
		if err := other.DeleteSession(ctx, "once"); err != nil {
			t.Fatal(err)
		}
		if err := st.Append(ctx, "once", pokes("once", 9, 1)...); err != nil {
			t.Fatal(err)
		}
		if ids, err := st.ListSessions(ctx); err != nil || !slices.Contains(ids, "once") {
			t.Errorf("ListSessions after a deletion and a new batch = %q, %v; want the session", ids, err)
		}
	})
	t.Run("SingleNodeURL", func(t *testing.T) {
		_, err := redis.Open(t.Context(), c.Nodes[0].URL(), redis.Options{})
		if err == nil || !strings.Contains(err.Error(), "redis+cluster://") {
			t.Errorf("Open of a redis:// URL naming a cluster node = %v, want an error pointing to redis+cluster://", err)
		}
	})
	t.Run("RunShared", func(t *testing.T) {
		storagetest.RunShared(t, func(t *testing.T) (storage.Storage, storage.Storage) {
			opts := redis.Options{Prefix: freshPrefix()}
			return open(t, url, opts), open(t, url, opts)
		})
	})
}
