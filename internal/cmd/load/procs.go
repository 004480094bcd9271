package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentichost/agentic/server"
)

// proc is a server process the measurements start: agentic-host serve or
// fake-provider, the lean model server, the AI SDK route.
type proc struct {
	name string
	cmd  *exec.Cmd
	url  string
	out  bytes.Buffer
	mu   sync.Mutex
}

// lockedWriter lets the process write its output while start reads it.
type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// start runs cmd and waits until its output matches banner, whose first
// group is the URL it serves at.
func start(name string, banner *regexp.Regexp, cmd *exec.Cmd) (*proc, error) {
	p := &proc{name: name, cmd: cmd}
	cmd.Stdout, cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		m := banner.FindStringSubmatch(p.out.String())
		p.mu.Unlock()
		if m != nil {
			p.url = m[1]
			return p, nil
		}
		if cmd.ProcessState != nil {
			break
		}
	}
	p.stop()
	return nil, fmt.Errorf("%s did not start: %s", name, p.output())
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// tail returns the last n lines of the process's output, to tell why a
// measurement failed.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.output(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stop ends the process (and its children: node's, python's).
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// cpu returns the CPU time (user + system, all threads) the process used
// so far, from /proc/PID/stat.
func (p *proc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: the fields follow its ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: /proc stat: %q", p.name, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: /proc stat: %q", p.name, b)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks, nil
}

var (
	bannerURL   = regexp.MustCompile(`base URL (http://[^ \n]+)`)
	bannerServe = regexp.MustCompile(`listening on (http://[^ \n]+)`)
)

// tools are the programs the process-based measurements run.
type tools struct {
	bin      string // agentic-host
	lean     string // scripts/leanmodel.py
	routeDir string // the AI SDK route, installed (npm ci); "" leaves it out
	// serveCPUs, when set, are the only CPUs serve runs on (taskset's
	// list, "0"); its GOMAXPROCS follows.
	serveCPUs string
}

// startModels starts the two model servers, a word a chunk, pausing
// latency before each chunk after the first: the project's fake and the
// lean one.
func (t tools) startModels(latency time.Duration) (fake, lean *proc, err error) {
	fake, err = start("fake model", bannerURL, exec.Command(t.bin, "fake-provider", "--addr", "127.0.0.1:0",
		"--words-per-chunk", "1", "--latency", latency.String()))
	if err != nil {
		return nil, nil, err
	}
	lean, err = start("lean model", bannerURL, exec.Command("python3", t.lean, "--latency-ms", strconv.FormatFloat(latency.Seconds()*1000, 'f', -1, 64)))
	if err != nil {
		fake.stop()
		return nil, nil, err
	}
	return fake, lean, nil
}

// tenantSpec is one tenant of a serve configuration.
type tenantSpec struct {
	name, key string
	rps       float64 // rate_limit.requests_per_second; 0: none
}

// startServe starts agentic-host serve on storage (file:DIR, redis://…)
// against the model at modelURL, with the tenants.
func (t tools) startServe(name, storageURL, modelURL string, tenants []tenantSpec, extra ...string) (*proc, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "storage: %s\nmodel:\n  base_url: %s\nmax_streams: 100000\nheartbeat: 15s\ntenants:\n", storageURL, modelURL)
	for _, tn := range tenants {
		fmt.Fprintf(&b, "  %s:\n    keys: [%q]\n    models: [fake/model]\n    agents:\n      default:\n        model: fake/model\n    rate_limit:\n      streams: 100000\n      streams_per_key: 100000\n", tn.name, server.HashKey(tn.key))
		if tn.rps > 0 {
			fmt.Fprintf(&b, "      requests_per_second: %g\n", tn.rps)
		}
	}
	dir, err := os.MkdirTemp("", "agentic-load-serve")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "agentic.yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-level", "error"}, extra...)
	cmd := exec.Command(t.bin, args...)
	if t.serveCPUs != "" {
		cmd = exec.Command("taskset", append([]string{"-c", t.serveCPUs, t.bin}, args...)...)
	}
	return start(name, bannerServe, cmd)
}

// startRoute starts the AI SDK route (node server.mjs PORT MODEL DIR).
func (t tools) startRoute(name, modelURL string) (*proc, error) {
	dir, err := os.MkdirTemp("", "agentic-load-route")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", "server.mjs", strconv.Itoa(port), modelURL, filepath.Join(dir, "chats"))
	cmd.Dir = t.routeDir
	p := &proc{name: name, cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	cmd.Stdout, cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// A connection, not a request: the route parses every request as a chat.
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.url, "http://"), time.Second); err == nil {
			c.Close()
			return p, nil
		}
	}
	p.stop()
	return nil, fmt.Errorf("%s did not start: %s", name, p.output())
}

// chatBody is what useChat's DefaultChatTransport posts for a new message.
func chatBody(id, text string) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "trigger": "submit-message", "messages": []any{map[string]any{
		"id": "m-" + id, "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}}})
	return b
}

// chatResult is one chat through a UI message stream route.
type chatResult struct {
	headers  time.Duration // POST until the response headers
	sseBytes int64
	err      error
}

// uiChat posts a chat to a UI message stream route and reads its stream to
// the end, checking that the text deltas join to want.
func uiChat(ctx context.Context, hc *http.Client, url, key string, body []byte, want string) chatResult {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	res, err := hc.Do(req)
	if err != nil {
		return chatResult{err: err}
	}
	defer res.Body.Close()
	r := chatResult{headers: time.Since(t0)}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		r.err = fmt.Errorf("%s: %.200s", res.Status, b)
		return r
	}
	cr := &countingReader{r: res.Body}
	sc := bufio.NewScanner(cr)
	sc.Buffer(nil, 1<<20)
	var text strings.Builder
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			continue
		}
		if !bytes.Contains(data, []byte(`"text-delta"`)) {
			continue
		}
		var ch struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		if json.Unmarshal(data, &ch) == nil && ch.Type == "text-delta" {
			text.WriteString(ch.Delta)
		}
	}
	r.sseBytes = cr.n
	switch {
	case sc.Err() != nil:
		r.err = sc.Err()
	case !done:
		r.err = fmt.Errorf("the stream ended without [DONE]")
	case text.String() != want:
		r.err = fmt.Errorf("the stream's text is %.60q, want %.60q", text.String(), want)
	}
	return r
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// newClient returns an HTTP client for n connections at once.
func newClient(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true, IdleConnTimeout: time.Minute}}
}
