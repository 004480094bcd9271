// Package redistest starts real redis-server processes for tests: a single
// node with [Start], a cluster with [StartCluster]. Each server listens on
// a free port of 127.0.0.1, keeps its files in a temporary directory of the
// test, and is stopped when the test ends. Tests never use a Redis that
// happens to run on the machine.
//
// When redis-server is not on PATH (or a cluster cannot be formed), the
// test is skipped with the reason, unless the environment sets
// AGENTIC_REQUIRE_REDIS=1 (as CI does), in which case it fails: a machine
// that should run these tests cannot silently skip them.
// scripts/test-deps.sh installs what is missing.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a skip for a missing
// redis-server into a failure when it is "1".
const RequireEnv = "AGENTIC_REQUIRE_REDIS"

// startTimeout bounds how long a server may take to answer PING (or to
// replay its append-only file).
const startTimeout = 20 * time.Second

// Options configures a server started by [Start]. The zero value is the
// default: no persistence at all.
type Options struct {
	// AppendOnly turns on the append-only file (--appendonly yes), so that
	// [Server.Restart] after [Server.Kill] replays it. Default false
	// (--appendonly no). RDB snapshots are always off (--save "").
	AppendOnly bool
	// AppendFsync is the --appendfsync policy when AppendOnly is set:
	// "always", "everysec" or "no". Default "everysec".
	AppendFsync string
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	// Default none.
	Args []string
}

// Server is one redis-server process. Its methods are safe for concurrent
// use, and they fail the test (t.Fatal) when the process does not do what
// they ask.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	paused bool
}

// Start starts a redis-server on a free port of 127.0.0.1 in a new
// temporary directory, waits until it answers PING, and registers its
// stop with t.Cleanup. It skips the test when redis-server is not on PATH
// (fails under AGENTIC_REQUIRE_REDIS=1).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	fsync := opts.AppendFsync
	if fsync == "" {
		fsync = "everysec"
	}
	appendOnly := "no"
	if opts.AppendOnly {
		appendOnly = "yes"
	}
	dir := t.TempDir()
	var lastErr error
	// A free port can be taken between our probe and the server's bind:
	// try a few.
	for range 5 {
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &Server{t: t, bin: bin, port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--save", "",
			"--appendonly", appendOnly,
			"--appendfsync", fsync,
			"--daemonize", "no",
			"--logfile", "redis.log",
		}, opts.Args...)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.cleanup)
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// lookPath finds a program on PATH, or skips the test (fails when
// AGENTIC_REQUIRE_REDIS=1).
func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, fmt.Sprintf("%s is not on PATH (install the Debian packages redis-server and redis-tools, or run scripts/test-deps.sh)", name))
	}
	return p
}

// Unavailable skips the test with the reason why Redis cannot be used here,
// or fails it when the environment sets AGENTIC_REQUIRE_REDIS=1.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("redistest: %s; %s=1 requires it", reason, RequireEnv)
	}
	t.Skipf("redistest: %s (set %s=1 to fail instead)", reason, RequireEnv)
}

// freePort returns a port of 127.0.0.1 that was free a moment ago. With
// bus, the port 10000 above it (a cluster node's bus port) was free too.
func freePort(bus bool) (int, error) {
	if !bus {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	// Ephemeral ports may lie above 55535, whose bus port would not
	// exist: probe pairs in a range below.
	base := 20000 + int(time.Now().UnixNano()%20000)
	for i := range 2000 {
		p := 20000 + (base-20000+i*7)%30000
		a, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, errors.New("find a free port pair for a cluster node: none found")
}

// start runs the process and waits for PING. s.mu is not held.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	var out bytes.Buffer // anything printed before the log file is open
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited while starting: %s%s", out.String(), s.logTail())
		default:
		}
		reply, err := s.Do("PING")
		if err == nil && reply == "+PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			s.signal(syscall.SIGKILL)
			<-exited
			return fmt.Errorf("redis-server did not answer PING within %v (last: %q, %v)%s", startTimeout, reply, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logTail returns the end of the server's log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// URL returns the server's URL, "redis://127.0.0.1:PORT/0".
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir returns the server's working directory, which holds its log
// (redis.log) and, with AppendOnly, its append-only files.
func (s *Server) Dir() string { return s.dir }

// Do sends one command to the server over a new connection and returns the
// first line of its reply in RESP ("+PONG", "-ERR …", ":1", "$5" …). It is
// for probing a server without a client library; the reply of a command
// whose answer spans lines is cut to its first line.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// running returns the process's exit channel, or nil when no process was
// started.
func (s *Server) running() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

// Kill ends the server with SIGKILL, as a crash would (nothing is flushed
// beyond what its fsync policy already wrote), and waits for it to exit.
func (s *Server) Kill() {
	s.t.Helper()
	s.Resume() // a stopped process dies of SIGKILL too, but be plain
	s.signal(syscall.SIGKILL)
	s.wait(5 * time.Second)
}

// Stop ends the server with SIGTERM (it then flushes its append-only file)
// and waits for it to exit; after 5 s it is killed.
func (s *Server) Stop() {
	s.t.Helper()
	s.Resume()
	s.signal(syscall.SIGTERM)
	if !s.waitFor(5 * time.Second) {
		s.signal(syscall.SIGKILL)
		s.wait(5 * time.Second)
	}
}

// Restart starts the server again, after Kill or Stop, on the same port and
// in the same directory, so that it replays its append-only file; it waits
// until the server answers PING (after the replay).
func (s *Server) Restart() {
	s.t.Helper()
	if exited := s.running(); exited != nil {
		select {
		case <-exited:
		default:
			s.t.Fatalf("redistest: Restart of a server that is still running (Kill or Stop it first)")
		}
	}
	var err error
	// The port may linger a moment after the kill.
	for range 20 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers
// nothing, like a server that hangs, until Resume.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

// wait waits for the process to exit, failing the test after d.
func (s *Server) wait(d time.Duration) {
	s.t.Helper()
	if !s.waitFor(d) {
		s.t.Fatalf("redistest: redis-server on port %d did not exit within %v", s.port, d)
	}
}

func (s *Server) waitFor(d time.Duration) bool {
	exited := s.running()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}

// cleanup stops the server at the end of the test: SIGTERM, then SIGKILL.
func (s *Server) cleanup() {
	exited := s.running()
	if exited == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	s.Resume()
	s.signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		s.signal(syscall.SIGKILL)
		<-exited
	}
}
