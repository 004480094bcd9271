package server_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
)

// The noisy neighbour, through serve: tenant acme's agents call one of the
// sandbox's heaviest attacks as a plugin (noisy.c: 16 MiB filled over and
// over with one bulk instruction a turn, until its call is stopped), as
// many at once as its sandbox lets them; tenant beta's agent calls a
// healthy plugin meanwhile, and a monitor asks /healthz. What beta and the
// monitor see is what the sandbox promises another tenant (measured by
// BenchmarkNoisyNeighbour; docs/operations.md states the bound).

// noisyWasm builds plugins/testdata/c/noisy.c: memset is memory.fill.
func noisyWasm(t testing.TB) []byte {
	kit, _ := filepath.Abs("../pdk/c")
	return plugintest.CPlugin(t, "../plugins/testdata/c", []string{"noisy.c", kit + "/agentic.c"}, []string{kit}, []string{"-mbulk-memory"})
}

// toolCaller answers a user message "call TOOL" with a call of TOOL, and
// the tool's result with "done".
func toolCaller(req model.Request) hosttest.Reply {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == ledger.RoleTool {
		return hosttest.Reply{Text: "done"}
	}
	tool, _ := strings.CutPrefix(last.Text(), "call ")
	args := "{}"
	if tool == "get_account" {
		args = `{"account_id":"42"}`
	}
	return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: tool, Arguments: args}}}
}

// neighbours is a server with acme's noisy plugin and beta's healthy one.
type neighbours struct {
	ts *testServer
}

func startNeighbours(t testing.TB) *neighbours {
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Sandbox.CallTimeout = server.Duration(500 * time.Millisecond)
		acme.RateLimit.ConcurrentRuns = 8
		c.Tenants["acme"] = acme
	}})
	ts.model.Respond = toolCaller
	for _, up := range []struct {
		key, name string
		wasm      []byte
	}{{ts.acme, "noisy", noisyWasm(t)}, {ts.beta, "get_account", plugintest.GoPlugin(t, "../examples/plugins/get_account")}} {
		req, _ := newRequest(ts, up.key, "PUT", "/v1/plugins/"+up.name, string(up.wasm))
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("upload %s: %v %v", up.name, res, err)
		}
		res.Body.Close()
	}
	return &neighbours{ts: ts}
}

// call sends a message to session id of the tenant of key, waits for its
// run, and returns how long it took.
func (n *neighbours) call(tb testing.TB, key, id, text string) (time.Duration, string) {
	start := time.Now()
	req, _ := newRequest(n.ts, key, "POST", "/v1/sessions/"+id+"/messages?wait=true", `{"text":"`+text+`"}`)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s: %v", text, err)
	}
	var body strings.Builder
	buf := make([]byte, 4096)
	for {
		k, err := res.Body.Read(buf)
		body.Write(buf[:k])
		if err != nil {
			break
		}
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("%s: %d %s", text, res.StatusCode, body.String())
	}
	return time.Since(start), body.String()
}

// healthz asks /healthz and returns how long it took.
func (n *neighbours) healthz(tb testing.TB) time.Duration {
	start := time.Now()
	res, err := http.Get(n.ts.URL + "/healthz")
	if err != nil {
		tb.Fatalf("healthz: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("healthz: %d", res.StatusCode)
	}
	return time.Since(start)
}

// attack keeps acme's eight sessions calling the noisy tool until stop is
// closed; it returns how many of its calls ended (each at its deadline).
func (n *neighbours) attack(tb testing.TB, stop chan struct{}) (wait func() int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				_, body := n.call(tb, n.ts.acme, fmt.Sprintf("noisy-%d-%d", i, j), "call fill")
				if !strings.Contains(body, `"status":"completed"`) {
					tb.Errorf("an attack's run: %s", body)
				}
				mu.Lock()
				ended++
				mu.Unlock()
			}
		}()
	}
	return func() int {
		wg.Wait()
		return ended
	}
}

// neighbourRound is one measure: beta's calls and the monitor's, quiet or
// during the attack.
type neighbourRound struct{ calls, health []time.Duration }

// measure runs k of beta's calls, one after another, while the monitor
// asks /healthz every 10 ms.
func (n *neighbours) measure(tb testing.TB, k int) neighbourRound {
	var r neighbourRound
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				r.health = append(r.health, n.healthz(tb))
			}
		}
	}()
	for i := range k {
		d, body := n.call(tb, n.ts.beta, fmt.Sprintf("beta-%d", i), "call get_account")
		if !strings.Contains(body, `"status":"completed"`) || !strings.Contains(body, "done") {
			tb.Fatalf("beta's run: %s", body)
		}
		r.calls = append(r.calls, d)
	}
	close(done)
	wg.Wait()
	return r
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestNoisyNeighbour: while acme's agents keep the noisy plugin running
// on eight calls at once, each stopped at its deadline, beta's agent's
// calls of its own plugin all complete, and /healthz answers throughout.
// (How long they take is measured by BenchmarkNoisyNeighbour; no test
// asserts a time.)
func TestNoisyNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an attack for a few seconds")
	}
	n := startNeighbours(t)
	stop := make(chan struct{})
	wait := n.attack(t, stop)
	during := n.measure(t, 20)
	close(stop)
	if ended := wait(); ended < 8 {
		t.Errorf("the attack's calls: %d ended, want at least one each of its eight", ended)
	}
	t.Logf("during the attack: beta's calls p50 %s p99 %s; /healthz p50 %s p99 %s (%d asked)",
		quantile(during.calls, 0.5), quantile(during.calls, 0.99), quantile(during.health, 0.5), quantile(during.health, 0.99), len(during.health))
}

// BenchmarkNoisyNeighbour reports beta's calls and /healthz, quiet and
// during acme's attack, as p50 and p99 in ms, and their ratios.
func BenchmarkNoisyNeighbour(b *testing.B) {
	n := startNeighbours(b)
	var quiet, loud neighbourRound
	for b.Loop() {
		q := n.measure(b, 20)
		stop := make(chan struct{})
		wait := n.attack(b, stop)
		l := n.measure(b, 20)
		close(stop)
		wait()
		quiet.calls, quiet.health = append(quiet.calls, q.calls...), append(quiet.health, q.health...)
		loud.calls, loud.health = append(loud.calls, l.calls...), append(loud.health, l.health...)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(quantile(quiet.calls, 0.99)), "call-p99-quiet-ms")
	b.ReportMetric(ms(quantile(loud.calls, 0.99)), "call-p99-attack-ms")
	b.ReportMetric(ms(quantile(quiet.health, 0.99)), "healthz-p99-quiet-ms")
	b.ReportMetric(ms(quantile(loud.health, 0.99)), "healthz-p99-attack-ms")
	b.ReportMetric(ms(quantile(loud.calls, 0.5))/ms(quantile(quiet.calls, 0.5)), "call-p50-attack/quiet")
}
