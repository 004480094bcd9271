package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// arrival is one chat of an open-loop load: sent at its scheduled time
// whatever the others do.
type arrival struct {
	tenant    string // the key's tenant
	ui        bool   // through the UI route (else POST …/messages)
	scheduled time.Time
	lag       time.Duration // sent this late (the client could not keep up)
	accept    time.Duration // scheduled time until 202, or the UI route's headers
	sseBytes  int64
	refused   bool // 429
	err       error
}

// openLoop sends chats to serve at rate a second for dur, half of each
// tenant's through POST /v1/sessions/{id}/messages (accepted at 202), half
// through the UI route (accepted at its headers, then read to the end), spread
// over the tenants' keys by weight and over the serve processes at urls in
// turn, and returns them. The chats of the tenants in raw go through POST
// only, by a rawPool: a flood whose cost is the server's, not the
// client's.
func openLoop(hc *http.Client, urls []string, tag string, rate float64, dur time.Duration, text string, keys map[string]string, weights map[string]float64, raw map[string]*rawPool) []*arrival {
	n := int(rate * dur.Seconds())
	var total float64
	names := make([]string, 0, len(weights))
	for name, w := range weights {
		names = append(names, name)
		total += w
	}
	// Interleave the tenants by weight, deterministically.
	plan := make([]string, n)
	credit := map[string]float64{}
	for i := range plan {
		best := ""
		for _, name := range names {
			credit[name] += weights[name] / total
			if best == "" || credit[name] > credit[best] || credit[name] == credit[best] && name < best {
				best = name
			}
		}
		credit[best]--
		plan[i] = best
	}
	out := make([]*arrival, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	start := time.Now().Add(50 * time.Millisecond)
	interval := time.Duration(float64(time.Second) / rate)
	// Each tenant's chats alternate between the routes (alternating
	// over all of them would give a tenant one route only whenever the
	// plan's period is even: weights 3 and 1 send every fourth chat,
	// always through the same route).
	sent := map[string]int{}
	for i := range n {
		a := &arrival{tenant: plan[i], ui: sent[plan[i]]%2 == 1 && raw[plan[i]] == nil, scheduled: start.Add(time.Duration(i) * interval)}
		sent[plan[i]]++
		out[i] = a
		time.Sleep(time.Until(a.scheduled))
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.lag = time.Since(a.scheduled)
			id := fmt.Sprintf("%s-%d", tag, i)
			key := keys[a.tenant]
			url := urls[i%len(urls)]
			if a.ui {
				r := uiChat(ctx, hc, url+"/v1/ui/chat", key, chatBody(id, text), "You said: "+text)
				a.accept, a.sseBytes, a.err = r.headers+a.lag, r.sseBytes, r.err
				if r.err != nil && strings.HasPrefix(r.err.Error(), "429") {
					a.refused, a.err = true, nil
				}
				return
			}
			if rp := raw[a.tenant]; rp != nil {
				status, err := rp.post("/v1/sessions/"+id+"/messages", key, `{"text":"`+text+`"}`)
				a.accept = time.Since(a.scheduled)
				switch {
				case err != nil:
					a.err = err
				case status == http.StatusTooManyRequests:
					a.refused = true
				case status != http.StatusAccepted:
					a.err = fmt.Errorf("POST messages: %d", status)
				}
				return
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/sessions/"+id+"/messages", strings.NewReader(`{"text":"`+text+`"}`))
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := hc.Do(req)
			if err != nil {
				a.err = err
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			a.accept = time.Since(a.scheduled)
			switch res.StatusCode {
			case http.StatusAccepted:
			case http.StatusTooManyRequests:
				a.refused = true
			default:
				a.err = fmt.Errorf("POST messages: %s", res.Status)
			}
		}()
	}
	wg.Wait()
	return out
}

// rawPool sends POSTs over kept-alive connections with no more than a
// write and http.ReadResponse, where an http.Client takes a transport's
// pool, two goroutines a connection and their hand-offs: a flooding
// client that costs the machine little, as one on another machine would.
type rawPool struct {
	addr string // host:port
	mu   sync.Mutex
	idle []*rawConn
}

// rawTimeout bounds one request of a rawPool.
const rawTimeout = time.Minute

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newRawPool(url string) *rawPool {
	return &rawPool{addr: strings.TrimPrefix(url, "http://")}
}

// post sends one request and returns the response's status, its body read.
func (p *rawPool) post(path, key, body string) (int, error) {
	p.mu.Lock()
	var rc *rawConn
	if n := len(p.idle); n > 0 {
		rc, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if rc == nil {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			return 0, err
		}
		rc = &rawConn{c: c, br: bufio.NewReader(c)}
	}
	// A server that stops answering fails the request, as the
	// http.Client's chats fail at their context's deadline.
	if err := rc.c.SetDeadline(time.Now().Add(rawTimeout)); err != nil {
		rc.c.Close()
		return 0, err
	}
	req := "POST " + path + " HTTP/1.1\r\nHost: " + p.addr + "\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(rc.c, req); err != nil {
		rc.c.Close()
		return 0, err
	}
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.c.Close()
		return 0, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.Close {
		rc.c.Close()
	} else {
		p.mu.Lock()
		p.idle = append(p.idle, rc)
		p.mu.Unlock()
	}
	return res.StatusCode, nil
}

func (p *rawPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rc := range p.idle {
		rc.c.Close()
	}
	p.idle = nil
}

// loadStats summarises the arrivals of one tenant ("" for all).
type loadStats struct {
	n, refused, failed int
	p50, p99, lagP99   time.Duration
	uiP99, postP99     time.Duration
	sseBytes           float64 // a UI chat
	firstErr           error
}

func statsOf(arrivals []*arrival, tenant string) loadStats {
	var s loadStats
	var all, ui, post, lags []time.Duration
	var sse int64
	uiN := 0
	for _, a := range arrivals {
		if tenant != "" && a.tenant != tenant {
			continue
		}
		s.n++
		lags = append(lags, a.lag)
		switch {
		case a.err != nil:
			s.failed++
			if s.firstErr == nil {
				s.firstErr = a.err
			}
			continue
		case a.refused:
			s.refused++
			continue
		}
		all = append(all, a.accept)
		if a.ui {
			ui = append(ui, a.accept)
			sse += a.sseBytes
			uiN++
		} else {
			post = append(post, a.accept)
		}
	}
	s.p50, s.p99, s.lagP99 = percentile(all, 0.5), percentile(all, 0.99), percentile(lags, 0.99)
	s.uiP99, s.postP99 = percentile(ui, 0.99), percentile(post, 0.99)
	if uiN > 0 {
		s.sseBytes = float64(sse) / float64(uiN)
	}
	return s
}

// openLoopReport measures serve on file storage under open-loop loads:
// the given rates, then rates up from the last until p99 crosses 100 ms
// (the capacity), then fairness at the capacity: one tenant at 10× its
// share beside another at its share, against both at their share.
func openLoopReport(t tools, rates []float64, dur time.Duration, words int, latency time.Duration, knownCapacity float64) error {
	fake, lean, err := t.startModels(latency)
	if err != nil {
		return err
	}
	defer fake.stop()
	lean.stop()
	dir, err := os.MkdirTemp("", "agentic-load-open")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	text := wordsText(words)
	hc := newClient(4096)
	fmt.Printf("\nOpen-loop load through serve (file storage), %v a rate, chats arriving at a fixed rate, half POST …/messages (accept: 202), half the UI route (accept: its headers, then the stream read to the end); %d words streamed at %v a word; load average %s\n",
		dur, words+2, latency, loadAvg())
	sp, err := t.startServe("serve", "file:"+filepath.Join(dir, "one"), fake.url, []tenantSpec{{name: "load", key: tenantKey}})
	if err != nil {
		return err
	}
	keys := map[string]string{"load": tenantKey}
	one := map[string]float64{"load": 1}
	openLoop(hc, []string{sp.url}, "warm", 50, time.Second, text, keys, one, nil)
	type point struct {
		rate float64
		s    loadStats
		cpu  time.Duration // serve's, per chat
	}
	var points []point
	measure := func(rate float64) (point, error) {
		c0, err := sp.cpu()
		if err != nil {
			return point{}, err
		}
		arr := openLoop(hc, []string{sp.url}, fmt.Sprintf("r%g", rate), rate, dur, text, keys, one, nil)
		time.Sleep(300 * time.Millisecond)
		c1, _ := sp.cpu()
		p := point{rate: rate, s: statsOf(arr, ""), cpu: (c1 - c0) / time.Duration(len(arr))}
		if p.s.failed > 0 {
			return p, fmt.Errorf("%g chats/s: %d failed, first: %v", rate, p.s.failed, p.s.firstErr)
		}
		keeps := "the client kept up"
		if p.s.lagP99 > 10*time.Millisecond {
			keeps = fmt.Sprintf("the client fell behind: sends p99 %v late", round(p.s.lagP99))
		}
		fmt.Printf("  %5.0f chats/s: accept p50 %v p99 %v (POST→202 p99 %v, UI headers p99 %v), serve CPU %.0f µs a chat (%.0f%% of a core), %d refused; %s\n",
			rate, round(p.s.p50), round(p.s.p99), round(p.s.postP99), round(p.s.uiP99), us(p.cpu), us(p.cpu)*rate/1e4, p.s.refused, keeps)
		points = append(points, p)
		return p, nil
	}
	for _, r := range rates {
		if _, err := measure(r); err != nil {
			sp.stop()
			return err
		}
	}
	// The capacity: up from the last rate until p99 crosses 100 ms.
	capacity := knownCapacity
	last := points[len(points)-1]
	for rate := last.rate; capacity == 0 && last.s.p99 <= 100*time.Millisecond && rate < 5000; {
		rate *= 1.4
		p, err := measure(float64(int(rate/10) * 10))
		if err != nil {
			sp.stop()
			return err
		}
		if p.s.p99 > 100*time.Millisecond {
			// Between the last rate under and this one, linearly.
			lo, hi := last, p
			f := float64(100*time.Millisecond-lo.s.p99) / float64(hi.s.p99-lo.s.p99)
			capacity = lo.rate + f*(hi.rate-lo.rate)
		}
		last = p
	}
	if capacity == 0 {
		for _, p := range points {
			if p.s.p99 > 100*time.Millisecond {
				capacity = p.rate
				break
			}
		}
	}
	sp.stop()
	if knownCapacity > 0 {
		fmt.Printf("  capacity: %.0f chats/s, as given (-capacity)\n", capacity)
	} else {
		fmt.Printf("  capacity on this machine (the rate where accept p99 crosses 100 ms): %.0f chats/s\n", capacity)
	}
	if capacity == 0 {
		return nil
	}

	// Fairness at the capacity: ten tenants, each limited to its share
	// (rate_limit.requests_per_second, a tenth of the capacity); then one of
	// them sends ten times its share. What the others see of it is the
	// cost of refusing its excess (429).
	const nTenants = 10
	share := capacity / nTenants
	var tenants []tenantSpec
	keys = map[string]string{}
	even, flood := map[string]float64{}, map[string]float64{}
	for i := range nTenants {
		name := fmt.Sprintf("t%d", i)
		tenants = append(tenants, tenantSpec{name: name, key: "ak_load_" + name, rps: share})
		keys[name] = "ak_load_" + name
		even[name], flood[name] = 1, 1
	}
	flood["t0"] = 10
	fp, err := t.startServe("serve (ten tenants)", "file:"+filepath.Join(dir, "ten"), fake.url, tenants)
	if err != nil {
		return err
	}
	defer fp.stop()
	flooder := newRawPool(fp.url)
	defer flooder.close()
	raw := map[string]*rawPool{"t0": flooder}
	openLoop(hc, []string{fp.url}, "warm", 50, time.Second, text, keys, even, raw)
	others := func(arr []*arrival) loadStats {
		var rest []*arrival
		for _, a := range arr {
			if a.tenant != "t0" {
				rest = append(rest, a)
			}
		}
		return statsOf(rest, "")
	}
	var base, flooded []time.Duration
	for i := range 3 {
		c0, _ := fp.cpu()
		b := others(openLoop(hc, []string{fp.url}, fmt.Sprintf("fair-base-%d", i), capacity, dur, text, keys, even, raw))
		c1, _ := fp.cpu()
		arr := openLoop(hc, []string{fp.url}, fmt.Sprintf("fair-flood-%d", i), capacity*(nTenants+9)/nTenants, dur, text, keys, flood, raw)
		c2, _ := fp.cpu()
		f, fl := others(arr), statsOf(arr, "t0")
		// What a refusal costs serve: the flood's CPU beyond the even run's.
		perRefusal := time.Duration(0)
		if fl.refused > 0 {
			perRefusal = ((c2 - c1) - (c1 - c0)) / time.Duration(fl.refused)
		}
		if b.failed+f.failed > 0 {
			return fmt.Errorf("fairness: the other tenants' chats failed: %v %v", b.firstErr, f.firstErr)
		}
		base, flooded = append(base, b.p99), append(flooded, f.p99)
		fmt.Printf("  fairness, round %d: the other tenants' accept p99 %v with t0 at its share, %v with t0 at 10× its share (%d of its %d chats refused, 429, about %.0f µs of serve's CPU each; %d failed)\n",
			i+1, round(b.p99), round(f.p99), fl.refused, fl.n, us(perRefusal), fl.failed)
	}
	mb, mf := medianOf(base, func(d time.Duration) float64 { return float64(d) }), medianOf(flooded, func(d time.Duration) float64 { return float64(d) })
	fmt.Printf("  fairness at %.0f chats/s, %d tenants (medians of 3): the others' accept p99 %v → %v with one at 10× its share: %+.0f%% (target ≤ +20%%)\n",
		capacity, nTenants, round(time.Duration(mb)), round(time.Duration(mf)), (mf/mb-1)*100)
	return nil
}
