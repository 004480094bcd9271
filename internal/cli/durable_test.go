package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// killingSteps is a server that counts http_steps' steps and SIGKILLs the
// process in pid at the arrival of one step, before answering it: the
// request in flight at the crash.
type killingSteps struct {
	*httptest.Server
	mu     sync.Mutex
	keys   map[int][]string
	killAt int
	victim func() *os.Process
	killed bool
}

func newKillingSteps(t *testing.T, killAt int) *killingSteps {
	s := &killingSteps{keys: map[int][]string{}, killAt: killAt}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Step int }
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &body) != nil {
			http.Error(w, "bad step", 400)
			return
		}
		s.mu.Lock()
		s.keys[body.Step] = append(s.keys[body.Step], r.Header.Get("Idempotency-Key"))
		kill := !s.killed && body.Step == s.killAt && s.victim != nil
		if kill {
			s.killed = true
		}
		victim := s.victim
		s.mu.Unlock()
		if kill {
			p := victim()
			_ = p.Signal(syscall.SIGKILL)
			for syscall.Kill(p.Pid, 0) == nil && !zombie(p.Pid) {
				time.Sleep(time.Millisecond)
			}
		}
		fmt.Fprintf(w, `{"done":%d}`, body.Step)
	}))
	t.Cleanup(s.Close)
	return s
}

// zombie reports whether the process pid has exited and waits to be
// reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// check: every step reached the server once, but step twice, which
// reached it twice with one key.
func (s *killingSteps) check(t *testing.T, steps, twice int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i <= steps; i++ {
		want := 1
		if i == twice {
			want = 2
		}
		if len(s.keys[i]) != want || (want == 2 && s.keys[i][0] != s.keys[i][1]) {
			t.Errorf("step %d reached the server with keys %q, want %d time(s) with one key", i, s.keys[i], want)
		}
	}
}

// stepsPlugin writes http_steps.wasm into a new directory (in its
// subdirectory sub, when not "") and returns the directory.
func stepsPlugin(t *testing.T, sub string) string {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sub, "http_steps.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/http_steps"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDurableCallChat: chat runs http_steps (five POSTs) and is SIGKILLed
// when step 3 arrives; the next chat in the session resumes the run first:
// steps 1, 2, 4 and 5 reach the server once, step 3 twice with the same
// key, and the call's answer holds all five.
func TestDurableCallChat(t *testing.T) {
	bin := needBinary(t)
	steps := newKillingSteps(t, 3)
	u, _ := url.Parse(steps.URL)
	common := []string{"--offline", "--storage", "file:" + t.TempDir(), "--plugins", stepsPlugin(t, ""), "--approve", "http_steps",
		"--plugin-allow-host", u.Host, "--plugin-allow-private", "--session", "d"}
	first := startProc(t, "chat", bin, append(append([]string{"chat"}, common...), "please http_steps url="+steps.URL+"/step steps=5")...)
	steps.mu.Lock()
	steps.victim = func() *os.Process { return first.cmd.Process }
	steps.mu.Unlock()
	if code := first.wait(2 * time.Minute); code != -1 && code != 137 {
		t.Logf("the first chat ended %d", code)
	}
	steps.mu.Lock()
	killed := steps.killed
	steps.mu.Unlock()
	if !killed {
		t.Fatalf("the first chat was not killed\n%s\n%s", first.out.String(), first.err.String())
	}
	code, out, errOut := runBin(t, bin, append(append([]string{"chat"}, common...), "thanks")...)
	if code != 0 || !strings.Contains(out, `"answer":"{\"done\":5}"`) {
		t.Fatalf("the second chat: exit %d\n%s\n%s", code, out, errOut)
	}
	steps.check(t, 5, 3)
}

// TestDurableCallServe: serve runs http_steps for a message and is
// SIGKILLed when step 3 arrives; serve started again (on Redis: another
// host, once the dead one's lease lapsed) resumes the run: every step
// reaches the server once, step 3 twice with the same key, and the session
// completes with the five answers.
func TestDurableCallServe(t *testing.T) {
	bin := needBinary(t)
	for _, kind := range []string{"file", "redis"} {
		t.Run(kind, func(t *testing.T) {
			storageURL := "file:" + t.TempDir()
			if kind == "redis" {
				storageURL = redistest.Start(t, redistest.Options{}).URL()
			}
			steps := newKillingSteps(t, 3)
			u, _ := url.Parse(steps.URL)
			model := slowModel(t)
			config := writeServeConfig(t, storageURL, model.URL(), fmt.Sprintf(`    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
    agents:
      default:
        approve: [http_steps]
plugins_dir: %s
lease_ttl: 500ms
`, u.Host, stepsPlugin(t, "acme")))
			first := startServe(t, "serve", bin, config)
			steps.mu.Lock()
			steps.victim = func() *os.Process { return first.cmd.Process }
			steps.mu.Unlock()
			first.post("d", "please http_steps url="+steps.URL+"/step steps=5")
			first.wait(2 * time.Minute)
			second := startServe(t, "serve again", bin, config)
			second.waitState("d", "completed", 2*time.Minute)
			body := second.must("GET", "/v1/sessions/d/transcript", "", http.StatusOK, nil)
			if !strings.Contains(body, `\"answer\":\"{\\\"done\\\":5}\"`) {
				t.Errorf("the transcript does not hold the fifth answer: %s", body)
			}
			steps.check(t, 5, 3)
		})
	}
}
