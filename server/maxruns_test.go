package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
)

// TestServeMaxRunsQueue: with queue_runs, new runs past max_runs wait in
// the process's queue instead of being refused, and each place that frees
// goes to the next tenant in turn: one tenant's three waiting runs do not
// hold back another's one that came after them. Past queue_runs waiting,
// a run is refused (503) saying so, and so is one of a tenant that holds
// half the queue's places already (so that a burst cannot fill it against
// the others); /metrics shows the queue by tenant and the waits.
func TestServeMaxRunsQueue(t *testing.T) {
	m := hosttest.StallingModel("", "thinking")
	ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
		c.MaxRuns, c.QueueRuns, c.QueueTimeout = 1, 6, server.Duration(time.Minute)
	}})
	keyOf := map[byte]string{'a': ts.acme, 'b': ts.beta}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/a1/messages", `{"text":"one"}`); code != 202 {
		t.Fatalf("the first run: %d %s", code, body)
	}
	queued := func(tenant string, n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d of %s in the queue", n, tenant), func() bool {
			return strings.HasSuffix(metricWith(ts, t, "agentic_admission_max_runs_queue_length{", `tenant="`+tenant+`"`), fmt.Sprintf(" %d", n))
		})
	}
	type answer struct {
		id, body string
		code     int
	}
	started := make(chan answer, 4)
	// Acme's three, then beta's one, each in the queue before the next
	// comes.
	for i, id := range []string{"a2", "a3", "a4", "b1"} {
		go func() {
			code, body := ts.do(t, keyOf[id[0]], "POST", "/v1/sessions/"+id+"/messages", `{"text":"hello"}`)
			started <- answer{id, body, code}
		}()
		if id[0] == 'a' {
			queued("acme", i+1)
		} else {
			queued("beta", 1)
		}
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/a5/messages", `{"text":"hello"}`); code != 503 ||
		!strings.Contains(body, "the server has 1 runs in flight, its limit (max_runs), and tenant acme's runs hold half of the queue's places already (queue_runs 6)") {
		t.Errorf("past acme's share of the queue: %d %s", code, body)
	}
	// Each run that ends lets the next in turn start: acme's first
	// waiting, then beta's, then acme's others.
	running := "a1"
	for _, id := range []string{"a2", "b1", "a3", "a4"} {
		if code, body := ts.do(t, keyOf[running[0]], "POST", "/v1/sessions/"+running+"/cancel", `{}`); code != 200 {
			t.Fatalf("cancel %s: %d %s", running, code, body)
		}
		select {
		case a := <-started:
			if a.id != id || a.code != 202 {
				t.Fatalf("after %s ended, %s was answered (%d %s), want %s started", running, a.id, a.code, a.body, id)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s never started after %s ended", id, running)
		}
		if len(started) > 0 {
			t.Fatalf("another run started with %s, past max_runs", id)
		}
		running = id
	}
	ts.do(t, ts.acme, "POST", "/v1/sessions/a4/cancel", `{}`)
	_, metrics := ts.do(t, "", "GET", "/metrics", "")
	for _, want := range []string{`outcome="admitted",queue="max_runs",tenant="acme"} 3`, `outcome="admitted",queue="max_runs",tenant="beta"} 1`, `outcome="full",queue="max_runs",tenant="acme"} 1`} {
		if !strings.Contains(metrics, "agentic_admission_queue_wait_seconds_count{") || !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no wait count ending %s", want)
		}
	}
	for _, tenant := range []string{"acme", "beta"} {
		if line := metricWith(ts, t, "agentic_admission_max_runs_queue_length{", `tenant="`+tenant+`"`); !strings.HasSuffix(line, " 0") {
			t.Errorf("/metrics' queue after: %q", line)
		}
	}
}

// TestServeMaxRunsQueueTimeout: a wait past queue_timeout is refused
// (503) saying so, its place in the queue given up; without queue_runs,
// max_runs refuses at once.
func TestServeMaxRunsQueueTimeout(t *testing.T) {
	for _, queue := range []int{0, 1} {
		t.Run(fmt.Sprintf("queue_runs=%d", queue), func(t *testing.T) {
			m := hosttest.StallingModel("", "thinking")
			ts := startServer(t, serverSetup{Options: func(o *server.Options) { o.Model = m }, Mutate: func(c *server.Config) {
				c.MaxRuns, c.QueueRuns, c.QueueTimeout = 1, queue, server.Duration(time.Millisecond)
			}})
			if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/busy/messages", `{"text":"stall"}`); code != 202 {
				t.Fatalf("the first run: %d %s", code, body)
			}
			defer ts.do(t, ts.acme, "POST", "/v1/sessions/busy/cancel", `{}`)
			want := "the server has 1 runs in flight, its limit (max_runs): retry shortly"
			if queue > 0 {
				want = "in the queue (queue_timeout) for a place"
			}
			for range 2 { // the place given up is there for the next
				if code, body := ts.do(t, ts.beta, "POST", "/v1/sessions/late/messages", `{"text":"hello"}`); code != 503 || !strings.Contains(body, want) {
					t.Errorf("past max_runs: %d %s, want 503 and %q", code, body, want)
				}
			}
			if line := metricWith(ts, t, "agentic_admission_queue_wait_seconds_count{", `queue="max_runs"`); (queue > 0) != strings.HasSuffix(line, " 2") {
				t.Errorf("/metrics' waits: %q", line)
			}
		})
	}
}
