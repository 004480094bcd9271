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

// Cluster is a Redis cluster, each node a [Server].
type Cluster struct {
	// Nodes are the cluster's nodes: its masters, in the order of their
	// slot ranges, then their replicas, master by master (the replicas
	// of Nodes[0] first). After a failover a replica may be a master:
	// [Cluster.Primaries] asks the nodes.
	Nodes []*Server
	opts  ClusterOptions
}

// ClusterOptions configures a cluster started by [StartClusterWith]. The
// zero value is StartCluster's: three masters without replicas.
type ClusterOptions struct {
	// Masters is the number of masters, at least 3. Default 3.
	Masters int
	// Replicas is the number of replicas of each master. Default 0.
	Replicas int
	// NodeTimeout is --cluster-node-timeout: how long a master may be
	// unreachable before its replica is promoted. Default 5s.
	NodeTimeout time.Duration
	// AppendOnly, AppendFsync and Args are as in [Options], for every
	// node.
	AppendOnly  bool
	AppendFsync string
	Args        []string
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
	return startCluster(t, ClusterOptions{Masters: n}, false)
}

// StartClusterWith starts a cluster as opts says: its masters as
// StartCluster does (from Go), then each master's replicas (CLUSTER
// REPLICATE), and waits until every node is ok and every replica is in
// sync with its master.
func StartClusterWith(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	return startCluster(t, opts, true)
}

// startCluster is StartClusterWith; fromGo forms the cluster from Go even
// when redis-cli is there (replicas are always joined from Go).
func startCluster(t testing.TB, opts ClusterOptions, fromGo bool) *Cluster {
	t.Helper()
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 5 * time.Second
	}
	if opts.AppendFsync == "" {
		opts.AppendFsync = "everysec"
	}
	if opts.Masters < 3 {
		t.Fatalf("redistest: StartCluster(%d): a cluster needs at least 3 masters", opts.Masters)
	}
	bin := lookPath(t, "redis-server")
	c := &Cluster{opts: opts}
	appendOnly := "no"
	if opts.AppendOnly {
		appendOnly = "yes"
	}
	for i := range opts.Masters * (1 + opts.Replicas) {
		var s *Server
		var err error
		for range 5 {
			var port int
			if port, err = freePort(true); err != nil {
				break
			}
			dir := t.TempDir()
			s = &Server{t: t, bin: bin, port: port, dir: dir, args: append([]string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", dir,
				"--save", "",
				"--appendonly", appendOnly,
				"--appendfsync", opts.AppendFsync,
				"--daemonize", "no",
				"--logfile", "redis.log",
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			}, opts.Args...)}
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
		Unavailable(t, fmt.Sprintf("cannot form a %d-node cluster: %v", len(c.Nodes), err))
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

// form assigns the slots, joins the nodes and the replicas, then waits
// for the cluster.
func (c *Cluster) form(fromGo bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	masters := c.Nodes[:c.opts.Masters]
	if cli, err := exec.LookPath("redis-cli"); err == nil && !fromGo {
		args := []string{"--cluster", "create"}
		for _, s := range masters {
			args = append(args, s.Addr())
		}
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
		}
	} else if err := c.formFromGo(ctx, masters); err != nil {
		return err
	}
	if err := c.joinReplicas(ctx); err != nil {
		return err
	}
	return c.WaitHealthy(ctx)
}

// formFromGo does what redis-cli --cluster create does, without it.
func (c *Cluster) formFromGo(ctx context.Context, masters []*Server) error {
	n := len(masters)
	for i, s := range masters {
		cl := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		lo, hi := i*slots/n, (i+1)*slots/n-1
		err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			err = cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(masters[0].Port())).Err()
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr(), err)
		}
	}
	return nil
}

// joinReplicas makes each replica node meet the cluster and replicate its
// master.
func (c *Cluster) joinReplicas(ctx context.Context) error {
	for i, s := range c.Nodes[c.opts.Masters:] {
		master := c.Nodes[i/c.opts.Replicas]
		mc := goredis.NewClient(&goredis.Options{Addr: master.Addr(), MaxRetries: -1})
		id, err := mc.ClusterMyID(ctx).Result()
		mc.Close()
		if err != nil {
			return fmt.Errorf("node %s: CLUSTER MYID: %w", master.Addr(), err)
		}
		cl := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		err = cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(master.Port())).Err()
		// The replica must know the master before it can replicate it.
		for err == nil {
			if err = cl.ClusterReplicate(ctx, id).Err(); err == nil || !strings.Contains(err.Error(), "Unknown node") {
				break
			}
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(50 * time.Millisecond):
				err = nil
			}
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("replica %s of %s: %w", s.Addr(), master.Addr(), err)
		}
	}
	return nil
}

// Primaries returns the nodes that are masters now, as each running node
// says of itself (ROLE): after a failover, a promoted replica is one, and a
// killed master is none.
func (c *Cluster) Primaries() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if reply, err := s.Do("ROLE"); err == nil && reply == "*3" {
			// A master's ROLE has 3 elements; a replica's 5. Do reads
			// only the first line, the array's length.
			out = append(out, s)
		}
	}
	return out
}

// WaitHealthy waits until every running node says cluster_state:ok, covers
// every slot and knows every node, and every replica's link to its master
// is up: after a failover, and after a node killed meanwhile restarted.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last string
	for {
		ok, why := c.healthy(ctx)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster is not healthy: %v; last: %s", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// healthy reports whether the cluster is as WaitHealthy waits for, and why
// not.
func (c *Cluster) healthy(ctx context.Context) (bool, string) {
	for _, s := range c.Nodes {
		if exited := s.running(); exited != nil {
			select {
			case <-exited:
				continue // killed: its replica stands in
			default:
			}
		}
		cl := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		var repl string
		if err == nil {
			repl, err = cl.Info(ctx, "replication").Result()
		}
		cl.Close()
		if err != nil {
			return false, s.Addr() + ": " + err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_slots_ok:"+strconv.Itoa(slots)) ||
			!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
			return false, s.Addr() + ": " + info
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return false, s.Addr() + ": " + repl
		}
	}
	return true, ""
}
