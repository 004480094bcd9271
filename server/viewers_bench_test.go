package server_test

import (
	"bufio"
	"fmt"
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
func BenchmarkIdleViewers(b *testing.B) {
	const viewers = 500
	ts := startServer(b, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) { tc.RateLimit.StreamsPerKey, tc.RateLimit.Streams = viewers, viewers })})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions/s/messages?wait=true", strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		b.Fatalf("the session's message: %v %v", res, err)
	}
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	addr := strings.TrimPrefix(ts.URL, "http://")
	measure := func() (goroutines int, heap, stacks uint64) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapInuse, ms.StackInuse
	}
	for b.Loop() {
		b.StopTimer()
		g0, h0, s0 := measure()
		conns := make([]net.Conn, 0, viewers)
		for range viewers {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			fmt.Fprintf(c, "GET /v1/sessions/s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", ts.acme)
			c.SetReadDeadline(time.Now().Add(time.Minute)) // a guard against a hang
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					b.Fatalf("a viewer's stream: %v", err)
				}
				if strings.HasPrefix(line, "event: snapshot") {
					break
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // the snapshots' writes settle
		g1, h1, s1 := measure()
		b.ReportMetric(float64(g1-g0)/viewers, "goroutines/viewer")
		b.ReportMetric(float64(int64(h1)-int64(h0))/viewers/1024, "heapKiB/viewer")
		b.ReportMetric(float64(int64(s1)-int64(s0))/viewers/1024, "stackKiB/viewer")
		for _, c := range conns {
			c.Close()
		}
		b.StartTimer()
	}
}
