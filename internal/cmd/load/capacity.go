package main

import (
	"bufio"
	"fmt"
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

func startRedis() (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
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
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// info returns the fields of INFO section.
func (r *redisServer) info(section string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return nil, fmt.Errorf("INFO: %q %v", head, err)
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
	netIn, netOut float64
	byCmd         map[string]float64
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
	u := redisUse{byCmd: map[string]float64{}}
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
func capacityModel(t tools, rate float64, dur time.Duration, words int, latency time.Duration) error {
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
	run := func(name, storageURL string, before, after func() error) (loadStats, time.Duration, int, error) {
		sp, err := t.startServe("serve ("+name+")", storageURL, fake.url, []tenantSpec{{name: "load", key: tenantKey}})
		if err != nil {
			return loadStats{}, 0, 0, err
		}
		defer sp.stop()
		openLoop(hc, sp.url, "warm", 20, time.Second, text, keys, one)
		if err := before(); err != nil {
			return loadStats{}, 0, 0, err
		}
		c0, _ := sp.cpu()
		arr := openLoop(hc, sp.url, "cap", rate, dur, text, keys, one)
		time.Sleep(500 * time.Millisecond)
		c1, _ := sp.cpu()
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
	s, cpu, n, err := run("file", "file:"+fdir, func() error { ledger0 = dirBytes(fdir); return nil }, func() error { return nil })
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
	s, cpu, n, err = run("redis", "redis://"+rs.addr+"/0",
		func() (err error) { u0, err = rs.use(); return err },
		func() (err error) { u1, err = rs.use(); return err })
	if err != nil {
		return err
	}
	per := func(a, b float64) float64 { return (b - a) / float64(n) }
	fmt.Printf("  Redis storage: serve CPU %.0f µs a chat; Redis %.1f commands a chat (%s), %.0f µs of Redis time, %.0f bytes in and %.0f out a chat; accept p99 %v\n",
		us(cpu), per(u0.calls, u1.calls), topCommands(u0, u1, n), per(u0.usec, u1.usec), per(u0.netIn, u1.netIn), per(u0.netOut, u1.netOut), round(s.p99))
	return nil
}

// topCommands lists the commands a chat made, most first.
func topCommands(a, b redisUse, n int) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range b.byCmd {
		if d := (v - a.byCmd[k]) / float64(n); d >= 0.05 {
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
		parts = append(parts, fmt.Sprintf("%s %.1f", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}
