package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/server"
)

// BenchmarkIdleViewers: what one idle SSE viewer of a session costs the
// server: 500 clients follow one session's events (GET
// /v1/sessions/{id}/events over raw connections, which cost the process
// nothing on the client's side), each past its first snapshot, then all
// idle. Reported per viewer: the server's goroutines, its heap and its
// goroutines' stacks (after a GC), against the process before they came.
//
// The time of an iteration (ns/op) is that of opening the 500 viewers and
// reading their snapshots; between iterations the viewers leave, and the
// next waits until the server has ended their streams (at a heartbeat).
func BenchmarkIdleViewers(b *testing.B) {
	const viewers = 500
	ts := viewedSession(b, viewers)
	for b.Loop() {
		goroutines, heap, stacks := idleViewers(b, ts, viewers)
		b.ReportMetric(goroutines, "goroutines/viewer")
		b.ReportMetric(heap/1024, "heapKiB/viewer")
		b.ReportMetric(stacks/1024, "stackKiB/viewer")
		b.StopTimer()
		waitFor(b, "the streams of the viewers that left to end", func() bool {
			res, err := http.Get(ts.URL + "/metrics")
			if err != nil {
				b.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			return metricValue(string(body), "agentic_http_event_streams") == "0"
		})
		b.StartTimer()
	}
}

// TestIdleViewerCost: an idle SSE viewer of a session costs the server
// one goroutine (its relay's: the stream took its connection over from
// net/http) and at most 32 KiB of heap and stacks. The memory is not
// checked under the race detector, which makes every frame larger.
func TestIdleViewerCost(t *testing.T) {
	const viewers = 200
	ts := viewedSession(t, viewers)
	goroutines, heap, stacks := idleViewers(t, ts, viewers)
	t.Logf("a viewer: %.2f goroutines, %.1f KiB heap, %.1f KiB stacks", goroutines, heap/1024, stacks/1024)
	if goroutines > 1.02 { // 4 of the server's own may come and go meanwhile
		t.Errorf("an idle viewer costs %.2f goroutines, want 1", goroutines)
	}
	if !raceBuild && heap+stacks > 32<<10 {
		t.Errorf("an idle viewer costs %.1f KiB, want at most 32", (heap+stacks)/1024)
	}
}

// viewedSession starts a server whose tenant acme takes viewers streams
// on one key, with one session, s, answered once. Its heartbeat is a
// second, so that a viewer's leaving is seen within one.
func viewedSession(tb testing.TB, viewers int) *testServer {
	ts := startServer(tb, serverSetup{Mutate: func(c *server.Config) {
		c.Heartbeat = server.Duration(time.Second)
		withTenant("acme", func(tc *server.TenantConfig) { tc.RateLimit.StreamsPerKey, tc.RateLimit.Streams = viewers, viewers })(c)
	}})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions/s/messages?wait=true", strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		tb.Fatalf("the session's message: %v %v", res, err)
	}
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	return ts
}

// idleViewers opens viewers raw connections that follow session s past
// their first snapshot, and returns what each costs the server: its
// goroutines, and the bytes of heap and of stacks (after a GC), against
// the process before they came. The connections are closed on return.
func idleViewers(tb testing.TB, ts *testServer, viewers int) (goroutines, heap, stacks float64) {
	addr := strings.TrimPrefix(ts.URL, "http://")
	measure := func() (goroutines int, heap, stacks uint64) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapInuse, ms.StackInuse
	}
	b, _ := tb.(*testing.B) // the measures are not timed
	if b != nil {
		b.StopTimer()
	}
	g0, h0, s0 := measure()
	if b != nil {
		b.StartTimer()
	}
	conns := make([]net.Conn, 0, viewers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range viewers {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/sessions/s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", ts.acme)
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				tb.Fatalf("a viewer's stream: %v", err)
			}
			if strings.HasPrefix(line, "event: snapshot") {
				break
			}
		}
	}
	if b != nil {
		b.StopTimer()
	}
	g1, h1, s1 := measure()
	if b != nil {
		b.StartTimer()
	}
	n := float64(viewers)
	return float64(g1-g0) / n, float64(int64(h1)-int64(h0)) / n, float64(int64(s1)-int64(s0)) / n
}
