package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
	refused   bool // 429, or 503 past max_runs
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
				if r.err != nil && (strings.HasPrefix(r.err.Error(), "429") || strings.HasPrefix(r.err.Error(), "503")) {
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
				case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable:
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
			body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			a.accept = time.Since(a.scheduled)
			switch res.StatusCode {
			case http.StatusAccepted:
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
				a.refused = true
			default:
				a.err = fmt.Errorf("POST messages: %s: %s", res.Status, bytes.TrimSpace(body))
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
// (the capacity), then fairness at the capacity: ten tenants at their
// share, against the same with one of them at 10× its share. On a machine
// of two CPUs or more, with taskset on PATH, the capacity and fairness are
// then measured again with serve alone on CPU 0 and the clients and the
// model on the other CPUs, as they would be on machines of their own: on
// shared CPUs, the flood's own sending takes CPU from serve, and what the
// others feel of it is the client's cost as much as serve's.
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
	o := &openLoopRun{t: t, fake: fake, dir: dir, dur: dur, text: wordsText(words), hc: newClient(4096)}
	fmt.Printf("\nOpen-loop load through serve (file storage), %v a rate, chats arriving at a fixed rate, half POST …/messages (accept: 202), half the UI route (accept: its headers, then the stream read to the end); %d words streamed at %v a word; load average %s\n",
		dur, words+2, latency, loadAvg())
	capacity, err := o.capacity("shared", rates, knownCapacity)
	if err != nil || capacity == 0 {
		return err
	}
	if knownCapacity > 0 {
		fmt.Printf("  capacity: %.0f chats/s, as given (-capacity)\n", capacity)
	} else {
		fmt.Printf("  capacity on this machine (the rate where accept p99 crosses 100 ms): %.0f chats/s\n", capacity)
	}
	if err := o.fairness("shared", capacity); err != nil {
		return err
	}

	n := runtime.NumCPU()
	if _, err := exec.LookPath("taskset"); err != nil || n < 2 || knownCapacity > 0 {
		fmt.Println("  (serve alone on a CPU: left out, it needs two CPUs, taskset on PATH and no -capacity)")
		return nil
	}
	all, rest := fmt.Sprintf("0-%d", n-1), fmt.Sprintf("1-%d", n-1)
	if n == 2 {
		rest = "1"
	}
	for _, pid := range []int{os.Getpid(), fake.cmd.Process.Pid} {
		if err := pin(pid, rest); err != nil {
			return err
		}
		defer pin(pid, all)
	}
	o.t.serveCPUs = "0"
	fmt.Printf("\nThe same with serve alone on CPU 0 (GOMAXPROCS 1), the clients and the fake model on CPU %s, as on machines of their own; load average %s\n", rest, loadAvg())
	// The first rate: under the shared capacity, serve having a CPU less.
	alone, err := o.capacity("alone", []float64{float64(int(capacity*0.6/10) * 10)}, 0)
	if err != nil || alone == 0 {
		return err
	}
	fmt.Printf("  capacity with serve alone on CPU 0: %.0f chats/s\n", alone)
	return o.fairness("alone", alone)
}

// pin sets the CPUs (taskset's list, "1-3") of every thread of the
// process pid; the threads it makes later take them from their maker.
func pin(pid int, cpus string) error {
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset %d to CPUs %s: %v: %s", pid, cpus, err, bytes.TrimSpace(out))
	}
	return nil
}

// openLoopRun is what the open-loop measurements share: the model, the
// storage's directory, the load's shape and the client.
type openLoopRun struct {
	t    tools
	fake *proc
	dir  string
	dur  time.Duration
	text string
	hc   *http.Client
}

// capacity measures a serve of its own at rates and returns the rate
// where its accept p99 crosses 100 ms (searchCapacity); a known capacity
// skips the search.
func (o *openLoopRun) capacity(name string, rates []float64, known float64) (float64, error) {
	sp, err := o.t.startServe("serve ("+name+")", "file:"+filepath.Join(o.dir, name), o.fake.url, []tenantSpec{{name: "load", key: tenantKey}})
	if err != nil {
		return 0, err
	}
	defer sp.stop()
	keys := map[string]string{"load": tenantKey}
	one := map[string]float64{"load": 1}
	openLoop(o.hc, []string{sp.url}, "warm", 50, time.Second, o.text, keys, one, nil)
	measure := func(rate float64) (time.Duration, error) {
		c0, err := sp.cpu()
		if err != nil {
			return 0, err
		}
		arr := openLoop(o.hc, []string{sp.url}, fmt.Sprintf("%s-r%g", name, rate), rate, o.dur, o.text, keys, one, nil)
		time.Sleep(300 * time.Millisecond)
		c1, _ := sp.cpu()
		s := statsOf(arr, "")
		cpu := (c1 - c0) / time.Duration(len(arr))
		if s.failed > 0 {
			return 0, fmt.Errorf("%g chats/s: %d failed, first: %v; serve's output ends:\n%s", rate, s.failed, s.firstErr, sp.tail(10))
		}
		keeps := "the client kept up"
		if s.lagP99 > 10*time.Millisecond {
			keeps = fmt.Sprintf("the client fell behind: sends p99 %v late", round(s.lagP99))
		}
		fmt.Printf("  %5.0f chats/s: accept p50 %v p99 %v (POST→202 p99 %v, UI headers p99 %v), serve CPU %.0f µs a chat (%.0f%% of a core), %d refused; %s\n",
			rate, round(s.p50), round(s.p99), round(s.postP99), round(s.uiP99), us(cpu), us(cpu)*rate/1e4, s.refused, keeps)
		return s.p99, nil
	}
	if known > 0 {
		for _, r := range rates {
			if _, err := measure(r); err != nil {
				return 0, err
			}
		}
		return known, nil
	}
	return searchCapacity(rates, 100*time.Millisecond, measure)
}

// searchCapacity measures at rates, then finds the rate where the p99
// that measure returns crosses limit: down from the lowest rate by 1.4×
// until one is under it, up from the highest by 1.4× until one is past
// it (20,000 at most), and between the two, linearly. It returns 0 when
// no rate up to 20,000 is past the limit, and the lowest rate measured
// when none is under it.
func searchCapacity(rates []float64, limit time.Duration, measure func(rate float64) (time.Duration, error)) (float64, error) {
	type point struct {
		rate float64
		p99  time.Duration
	}
	var points []point
	at := func(rate float64) (point, error) {
		p99, err := measure(rate)
		p := point{rate, p99}
		points = append(points, p)
		return p, err
	}
	for _, r := range rates {
		if _, err := at(r); err != nil {
			return 0, err
		}
	}
	if len(points) == 0 {
		return 0, nil
	}
	byRate := func(a, b point) int { return cmp.Compare(a.rate, b.rate) }
	for low, steps := slices.MinFunc(points, byRate), 0; low.p99 > limit && steps < 6; steps++ {
		rate := float64(int(low.rate/1.4/10) * 10)
		if rate < 10 {
			break
		}
		var err error
		if low, err = at(rate); err != nil {
			return 0, err
		}
	}
	for high := slices.MaxFunc(points, byRate); high.p99 <= limit; {
		rate := float64(int(high.rate*1.4/10) * 10)
		if rate > 20000 {
			break
		}
		var err error
		if high, err = at(rate); err != nil {
			return 0, err
		}
	}
	// The first rate past the limit, and the rate under it just below.
	slices.SortFunc(points, byRate)
	for i, p := range points {
		if p.p99 <= limit {
			continue
		}
		if i == 0 || points[i-1].p99 > limit {
			return p.rate, nil
		}
		lo := points[i-1]
		f := float64(limit-lo.p99) / float64(p.p99-lo.p99)
		return lo.rate + f*(p.rate-lo.rate), nil
	}
	return 0, nil
}

// fairness measures, at the capacity, ten tenants each limited to their
// share (rate_limit.requests_per_second, a tenth of the capacity), then the
// same with one of them at ten times its share: what the others see of it
// is the cost of refusing its excess (429). Three rounds, alternating.
func (o *openLoopRun) fairness(name string, capacity float64) error {
	const nTenants = 10
	share := capacity / nTenants
	var tenants []tenantSpec
	keys := map[string]string{}
	even, flood := map[string]float64{}, map[string]float64{}
	for i := range nTenants {
		tn := fmt.Sprintf("t%d", i)
		tenants = append(tenants, tenantSpec{name: tn, key: "ak_load_" + tn, rps: share})
		keys[tn] = "ak_load_" + tn
		even[tn], flood[tn] = 1, 1
	}
	flood["t0"] = 10
	fp, err := o.t.startServe("serve (ten tenants, "+name+")", "file:"+filepath.Join(o.dir, "ten-"+name), o.fake.url, tenants)
	if err != nil {
		return err
	}
	defer fp.stop()
	flooder := newRawPool(fp.url)
	defer flooder.close()
	raw := map[string]*rawPool{"t0": flooder}
	openLoop(o.hc, []string{fp.url}, "warm", 50, time.Second, o.text, keys, even, raw)
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
		b := others(openLoop(o.hc, []string{fp.url}, fmt.Sprintf("fair-%s-base-%d", name, i), capacity, o.dur, o.text, keys, even, raw))
		c1, _ := fp.cpu()
		arr := openLoop(o.hc, []string{fp.url}, fmt.Sprintf("fair-%s-flood-%d", name, i), capacity*(nTenants+9)/nTenants, o.dur, o.text, keys, flood, raw)
		c2, _ := fp.cpu()
		f, fl := others(arr), statsOf(arr, "t0")
		// What a refusal costs serve: the flood's CPU beyond the even run's.
		perRefusal := time.Duration(0)
		if fl.refused > 0 {
			perRefusal = ((c2 - c1) - (c1 - c0)) / time.Duration(fl.refused)
		}
		if b.failed+f.failed > 0 {
			return fmt.Errorf("fairness: the other tenants' chats failed: %v %v; serve's output ends:\n%s", b.firstErr, f.firstErr, fp.tail(10))
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
