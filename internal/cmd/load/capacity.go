package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// redisServer is a redis-server this program started.
type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis(args ...string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, args...)...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	r := &redisServer{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := r.info("server"); err == nil {
			return r, nil
		}
	}
	r.stop()
	return nil, fmt.Errorf("redis-server did not start")
}

func (r *redisServer) stop() {
	if r.cmd.ProcessState != nil {
		return // stopped already
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// redisCluster is a Redis Cluster of redis-servers this program started,
// a primary each, no replicas.
type redisCluster struct {
	nodes []*redisServer
	dir   string
}

// startRedisCluster starts n redis-servers with cluster mode on and joins
// them with redis-cli --cluster create, the slots split evenly.
func startRedisCluster(n int) (*redisCluster, error) {
	dir, err := os.MkdirTemp("", "agentic-load-cluster")
	if err != nil {
		return nil, err
	}
	c := &redisCluster{dir: dir}
	var addrs []string
	for i := range n {
		r, err := startRedis("--cluster-enabled", "yes", "--dir", dir, "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, r)
		addrs = append(addrs, r.addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, r := range c.nodes {
			if info, err := r.fields("CLUSTER", "INFO"); err != nil || info["cluster_state"] != "ok" {
				ok = false
			}
		}
		if ok {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the cluster did not reach cluster_state:ok")
		}
	}
}

func (c *redisCluster) url() string {
	var addrs []string
	for _, r := range c.nodes {
		addrs = append(addrs, r.addr)
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// use sums what the nodes did.
func (c *redisCluster) use() (redisUse, error) {
	sum := newRedisUse()
	for _, r := range c.nodes {
		u, err := r.use()
		if err != nil {
			return redisUse{}, err
		}
		sum.add(u)
	}
	return sum, nil
}

func (c *redisCluster) stop() {
	for _, r := range c.nodes {
		r.stop()
	}
	os.RemoveAll(c.dir)
}

// info returns the fields of INFO section.
func (r *redisServer) info(section string) (map[string]string, error) {
	return r.fields("INFO", section)
}

// fields sends a command whose reply is a bulk string of key:value lines
// (INFO, CLUSTER INFO) and returns them.
func (r *redisServer) fields(args ...string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return nil, fmt.Errorf("%s: %q %v", args[0], head, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	buf := make([]byte, n+2)
	if _, err := ioReadFull(br, buf); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(buf), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// redisUse is what Redis did: commands, their server time, bytes in and out.
type redisUse struct {
	calls, usec   float64
	cpuSec        float64 // the main thread's CPU, seconds
	netIn, netOut float64
	byCmd         map[string]float64 // calls
	usecByCmd     map[string]float64
}

func newRedisUse() redisUse {
	return redisUse{byCmd: map[string]float64{}, usecByCmd: map[string]float64{}}
}

// add adds what another server did.
func (u *redisUse) add(v redisUse) {
	u.calls += v.calls
	u.usec += v.usec
	u.cpuSec += v.cpuSec
	u.netIn += v.netIn
	u.netOut += v.netOut
	for k, x := range v.byCmd {
		u.byCmd[k] += x
	}
	for k, x := range v.usecByCmd {
		u.usecByCmd[k] += x
	}
}

func (r *redisServer) use() (redisUse, error) {
	cs, err := r.info("commandstats")
	if err != nil {
		return redisUse{}, err
	}
	st, err := r.info("stats")
	if err != nil {
		return redisUse{}, err
	}
	cpu, err := r.info("cpu")
	if err != nil {
		return redisUse{}, err
	}
	u := newRedisUse()
	// The main thread's CPU (the server's others: background saves,
	// I/O threads, are not the commands').
	for _, k := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		x, _ := strconv.ParseFloat(cpu[k], 64)
		u.cpuSec += x
	}
	for k, v := range cs {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok || name == "info" {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(fv, 64)
			switch fk {
			case "calls":
				u.calls += x
				u.byCmd[name] += x
			case "usec":
				u.usec += x
				u.usecByCmd[name] += x
			}
		}
	}
	u.netIn, _ = strconv.ParseFloat(st["total_net_input_bytes"], 64)
	u.netOut, _ = strconv.ParseFloat(st["total_net_output_bytes"], 64)
	return u, nil
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// capacityModel measures, per chat, what sizing needs: serve's CPU, the
// ledger's bytes (file storage), the SSE bytes, and on Redis storage the
// commands, their server time and the bytes in and out (INFO commandstats
// and stats before and after), at rate chats a second for dur.
func capacityModel(t tools, rate float64, dur time.Duration, words int, latency time.Duration, hosts int) error {
	fake, lean, err := t.startModels(latency)
	if err != nil {
		return err
	}
	defer fake.stop()
	lean.stop()
	text := wordsText(words)
	hc := newClient(4096)
	keys := map[string]string{"load": tenantKey}
	one := map[string]float64{"load": 1}
	fmt.Printf("\nCapacity model: per chat (%g chats/s for %v through serve, %d words streamed, half through the UI route), load average %s\n", rate, dur, words+2, loadAvg())

	dir, err := os.MkdirTemp("", "agentic-load-capacity")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// run sends the chats to hosts serve processes on storageURL, in turn,
	// and returns their stats and the CPU of the processes together per
	// chat.
	run := func(name, storageURL string, hosts int, before, after func() error) (loadStats, time.Duration, int, error) {
		var urls []string
		var sps []*proc
		defer func() {
			for _, sp := range sps {
				sp.stop()
			}
		}()
		for i := range hosts {
			sp, err := t.startServe(fmt.Sprintf("serve (%s, %d of %d)", name, i+1, hosts), storageURL, fake.url, []tenantSpec{{name: "load", key: tenantKey}})
			if err != nil {
				return loadStats{}, 0, 0, err
			}
			sps = append(sps, sp)
			urls = append(urls, sp.url)
		}
		cpu := func() (d time.Duration) {
			for _, sp := range sps {
				c, _ := sp.cpu()
				d += c
			}
			return d
		}
		openLoop(hc, urls, "warm", 20, time.Second, text, keys, one, nil)
		if err := before(); err != nil {
			return loadStats{}, 0, 0, err
		}
		c0 := cpu()
		arr := openLoop(hc, urls, "cap", rate, dur, text, keys, one, nil)
		time.Sleep(500 * time.Millisecond)
		c1 := cpu()
		if err := after(); err != nil {
			return loadStats{}, 0, 0, err
		}
		s := statsOf(arr, "")
		if s.failed > 0 {
			return s, 0, 0, fmt.Errorf("%s: %d chats failed, first: %v", name, s.failed, s.firstErr)
		}
		return s, (c1 - c0) / time.Duration(len(arr)), len(arr), nil
	}
	var ledger0 int64
	fdir := filepath.Join(dir, "file")
	s, cpu, n, err := run("file", "file:"+fdir, 1, func() error { ledger0 = dirBytes(fdir); return nil }, func() error { return nil })
	if err != nil {
		return err
	}
	ledger := float64(dirBytes(fdir)-ledger0) / float64(n)
	fmt.Printf("  file storage: serve CPU %.0f µs a chat, ledger %.0f bytes a chat, SSE %.0f bytes a UI chat, accept p99 %v\n", us(cpu), ledger, s.sseBytes, round(s.p99))

	rs, err := startRedis()
	if err != nil {
		fmt.Printf("  Redis storage: left out (%v)\n", err)
		return nil
	}
	defer rs.stop()
	var u0, u1 redisUse
	s, cpu, n, err = run("redis", "redis://"+rs.addr+"/0", 1,
		func() (err error) { u0, err = rs.use(); return err },
		func() (err error) { u1, err = rs.use(); return err })
	if err != nil {
		return err
	}
	printRedis := func(what string) {
		per := func(a, b float64) float64 { return (b - a) / float64(n) }
		fmt.Printf("  %s: serve CPU %.0f µs a chat; Redis %.1f commands a chat (%s), %.0f µs of Redis's CPU (main thread) and %.0f µs of command time (%s), %.0f bytes in and %.0f out a chat; accept p99 %v\n",
			what, us(cpu), per(u0.calls, u1.calls), topCommands(u0.byCmd, u1.byCmd, n, 0.05, 1), per(u0.cpuSec, u1.cpuSec)*1e6, per(u0.usec, u1.usec), topCommands(u0.usecByCmd, u1.usecByCmd, n, 5, 0),
			per(u0.netIn, u1.netIn), per(u0.netOut, u1.netOut), round(s.p99))
	}
	printRedis("Redis storage")
	rs.stop()

	// The model checked: hosts serve processes (3) on a three-node
	// cluster, the chats sent to each in turn, their figures per chat
	// summed.
	if hosts <= 0 {
		return nil
	}
	rc, err := startRedisCluster(3)
	if err != nil {
		fmt.Printf("  Redis Cluster: left out (%v)\n", err)
		return nil
	}
	defer rc.stop()
	s, cpu, n, err = run("cluster", rc.url(), hosts,
		func() (err error) { u0, err = rc.use(); return err },
		func() (err error) { u1, err = rc.use(); return err })
	if err != nil {
		return err
	}
	printRedis(fmt.Sprintf("%d serve on a 3-node Redis Cluster", hosts))
	return nil
}

// topCommands lists what each command took a chat (calls or µs), from
// the counts before (a) and after (b), most first, down to least, with
// prec decimals.
func topCommands(a, b map[string]float64, n int, least float64, prec int) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range b {
		if d := (v - a[k]) / float64(n); d >= least {
			l = append(l, kv{k, d})
		}
	}
	for i := range l {
		for j := i + 1; j < len(l); j++ {
			if l[j].v > l[i].v {
				l[i], l[j] = l[j], l[i]
			}
		}
	}
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%s %.*f", x.k, prec, x.v))
	}
	return strings.Join(parts, ", ")
}
