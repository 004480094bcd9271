package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// routeSide is one server a chat goes through: serve's UI route or the AI
// SDK's, against one model server.
type routeSide struct {
	name, model string // "serve" or "aisdk"; "fake" or "lean"
	proc        *proc
	url, key    string
}

// routeReport is one burst through one side.
type routeReport struct {
	cpuPerChat             time.Duration
	headersP50, headersP99 time.Duration
	sseBytes               float64 // per chat
	wall                   time.Duration
}

// burst sends n chats at once through the side and measures its process's
// CPU per chat and the time to the response headers.
func (s routeSide) burst(hc *http.Client, tag string, n int, text string) (routeReport, error) {
	var rep routeReport
	c0, err := s.proc.cpu()
	if err != nil {
		return rep, err
	}
	results := make([]chatResult, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i] = uiChat(ctx, hc, s.url, s.key, chatBody(fmt.Sprintf("%s-%d", tag, i), text), "You said: "+text)
		}()
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	rep.wall = time.Since(t0)
	// The process may still write the last chats' files: let it settle.
	time.Sleep(200 * time.Millisecond)
	c1, err := s.proc.cpu()
	if err != nil {
		return rep, err
	}
	heads := make([]time.Duration, 0, n)
	var sse int64
	for i, r := range results {
		if r.err != nil {
			return rep, fmt.Errorf("%s/%s chat %d: %w", s.name, s.model, i, r.err)
		}
		heads = append(heads, r.headers)
		sse += r.sseBytes
	}
	rep.cpuPerChat = (c1 - c0) / time.Duration(n)
	rep.headersP50, rep.headersP99 = percentile(heads, 0.5), percentile(heads, 0.99)
	rep.sseBytes = float64(sse) / float64(n)
	return rep, nil
}

// routeCompare measures serve's UI route beside the AI SDK route, both
// persisting to files, against both model servers: rounds of a burst of n
// chats at once through each, alternating, and prints the medians.
func routeCompare(t tools, rounds, n, words int) error {
	fake, lean, err := t.startModels(0)
	if err != nil {
		return err
	}
	defer fake.stop()
	defer lean.stop()
	var sides []routeSide
	defer func() {
		for _, s := range sides {
			s.proc.stop()
		}
	}()
	for _, m := range []*proc{fake, lean} {
		model := strings.Fields(m.name)[0]
		dir, err := os.MkdirTemp("", "agentic-load-route-serve")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		sp, err := t.startServe("serve ("+model+")", "file:"+dir, m.url, []tenantSpec{{name: "load", key: tenantKey}})
		if err != nil {
			return err
		}
		sides = append(sides, routeSide{name: "serve", model: model, proc: sp, url: sp.url + "/v1/ui/chat", key: tenantKey})
		if t.routeDir != "" {
			rp, err := t.startRoute("AI SDK route ("+model+")", m.url)
			if err != nil {
				return err
			}
			sides = append(sides, routeSide{name: "aisdk", model: model, proc: rp, url: rp.url + "/api/chat"})
		}
	}
	text := wordsText(words)
	hc := newClient(n)
	fmt.Printf("\nUI chat route: %d chats at once, %d words each streamed a word a chunk, file storage; CPU of the server process per chat (/proc), %d rounds alternating; load average %s\n",
		n, words+2, rounds, loadAvg())
	for _, s := range sides { // warm up
		if _, err := s.burst(hc, "warm", 20, text); err != nil {
			return err
		}
	}
	got := map[string][]routeReport{}
	for round := range rounds {
		for _, s := range sides {
			r, err := s.burst(hc, fmt.Sprintf("r%d", round), n, text)
			if err != nil {
				return err
			}
			k := s.name + "/" + s.model
			got[k] = append(got[k], r)
			fmt.Printf("  round %d %-11s CPU %7.0f µs a chat, headers p50 %v p99 %v, %.0f SSE bytes a chat, %v\n",
				round+1, k, us(r.cpuPerChat), round2(r.headersP50), round2(r.headersP99), r.sseBytes, round2(r.wall))
		}
	}
	worst := 0.0
	for _, model := range []string{"fake", "lean"} {
		ours, ok := got["serve/"+model]
		if !ok {
			continue
		}
		o := medianOf(ours, func(r routeReport) float64 { return us(r.cpuPerChat) })
		oh := medianOf(ours, func(r routeReport) float64 { return us(r.headersP99) })
		line := fmt.Sprintf("  medians, %s model: serve %.0f µs a chat (headers p99 %.1f ms)", model, o, oh/1000)
		if peer, ok := got["aisdk/"+model]; ok {
			a := medianOf(peer, func(r routeReport) float64 { return us(r.cpuPerChat) })
			ah := medianOf(peer, func(r routeReport) float64 { return us(r.headersP99) })
			line += fmt.Sprintf(", AI SDK route %.0f µs (headers p99 %.1f ms): %.3f× the CPU, %.2f× the headers p99", a, ah/1000, o/a, oh/ah)
			worst = max(worst, o/a)
		}
		fmt.Println(line)
	}
	if worst > 0 {
		fmt.Printf("  worst ratio of the CPU per chat: %.3f× (target ≤ 0.10×)\n", worst)
	} else {
		fmt.Println("  (no AI SDK route: set -aisdk-route DIR, installed, for the comparison)")
	}
	return nil
}

func wordsText(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", i)
	}
	return strings.Join(w, " ")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func round2(d time.Duration) time.Duration { return round(d) }

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
