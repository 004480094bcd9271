package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// slots is the number of hash slots of a Redis cluster.
const slots = 16384

// Cluster is a Redis cluster of masters without replicas, each a [Server].
type Cluster struct {
	// Nodes are the cluster's masters, in the order of their slot ranges.
	Nodes []*Server
}

// StartCluster starts n redis-server processes with --cluster-enabled yes
// (n ≥ 3, no replicas), joins them into one cluster whose slots are split
// evenly, and waits until every node reports cluster_state:ok and knows the
// others. It forms the cluster with redis-cli --cluster create when
// redis-cli is on PATH, else from Go (CLUSTER ADDSLOTSRANGE and CLUSTER
// MEET). It skips the test, with the reason, when the cluster cannot be
// formed (fails under AGENTIC_REQUIRE_REDIS=1). The nodes are stopped when
// the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, false)
}

// startCluster is StartCluster; fromGo forms the cluster from Go even when
// redis-cli is there.
func startCluster(t testing.TB, n int, fromGo bool) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: StartCluster(%d): a cluster needs at least 3 masters", n)
	}
	bin := lookPath(t, "redis-server")
	c := &Cluster{}
	for i := range n {
		var s *Server
		var err error
		for range 5 {
			var port int
			if port, err = freePort(true); err != nil {
				break
			}
			dir := t.TempDir()
			s = &Server{t: t, bin: bin, port: port, dir: dir, args: []string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", dir,
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--logfile", "redis.log",
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "5000",
			}}
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			Unavailable(t, fmt.Sprintf("cannot start cluster node %d: %v", i, err))
		}
		t.Cleanup(s.cleanup)
		c.Nodes = append(c.Nodes, s)
	}
	if err := c.form(fromGo); err != nil {
		Unavailable(t, fmt.Sprintf("cannot form a %d-node cluster: %v", n, err))
	}
	return c
}

// Addrs returns the nodes' addresses, "127.0.0.1:PORT".
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// form assigns the slots and joins the nodes, then waits for the cluster.
func (c *Cluster) form(fromGo bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cli, err := exec.LookPath("redis-cli"); err == nil && !fromGo {
		args := append([]string{"--cluster", "create"}, c.Addrs()...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
		}
	} else if err := c.formFromGo(ctx); err != nil {
		return err
	}
	return c.waitOK(ctx)
}

// formFromGo does what redis-cli --cluster create does, without it.
func (c *Cluster) formFromGo(ctx context.Context) error {
	n := len(c.Nodes)
	for i, s := range c.Nodes {
		cl := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		lo, hi := i*slots/n, (i+1)*slots/n-1
		err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			err = cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[0].Port())).Err()
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr(), err)
		}
	}
	return nil
}

// waitOK waits until every node says cluster_state:ok, covers every slot
// and knows every other node.
func (c *Cluster) waitOK(ctx context.Context) error {
	clients := make([]*goredis.Client, len(c.Nodes))
	for i, s := range c.Nodes {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		defer clients[i].Close()
	}
	var last string
	for {
		ok := true
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				last, ok = err.Error(), false
				break
			}
			if !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_ok:"+strconv.Itoa(slots)) ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
				last, ok = info, false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster is not ok: %v; last CLUSTER INFO:\n%s", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
