// Command load measures the HTTP + SSE service under many sessions at
// once (make load): for each storage, it starts the server in-process
// (server.New, one tenant, over the storage), the fake model with a pause
// between streamed words, and a client process of its own (this program
// again, with -client) that posts a message to each of N sessions at once
// and follows each over SSE to its run's end. It prints the accept latency
// of the messages (POST until 202) beside the storage's own append
// latency, measured in the same run; the SSE events delivered per second;
// and, once every run has ended with its viewer still attached, the
// server's memory per idle session. The clients run in their own process
// so that their connections and buffers are not counted as the server's.
//
// It fails (exit 1) when a message is refused, a run does not complete, or
// a stream loses or repeats a character.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
)

const tenantKey = "ak_load_tenant"

func main() {
	sessions := flag.Int("sessions", 1000, "sessions at once, each with its SSE viewer")
	stores := flag.String("storage", "file,memory", "the storages to measure, comma-separated: file, memory")
	words := flag.Int("words", 20, "words in each message (the fake model echoes them, one streamed chunk each)")
	latency := flag.Duration("latency", 20*time.Millisecond, "the fake model's pause before each streamed chunk after the first")
	client := flag.Bool("client", false, "run as the client process (internal)")
	url := flag.String("url", "", "the server's URL (-client)")
	cpuProfile := flag.String("cpuprofile", "", "write the server process's CPU profile to `FILE`")
	bin := flag.String("bin", "bin/agentic-host", "the agentic-host `binary` the process-based measurements run (serve, fake-provider)")
	lean := flag.String("lean", "scripts/leanmodel.py", "the lean model server's `script` (Python)")
	routeDir := flag.String("aisdk-route", "", "the AI SDK route's `DIR` (shared/bench/aisdk-route, installed with npm ci): its CPU per chat beside serve's")
	route := flag.Int("route", 0, "chats at once through serve's UI route (and the AI SDK route) for the CPU per chat; 0 leaves it out")
	rounds := flag.Int("rounds", 3, "rounds of the route comparison")
	rates := flag.String("rates", "", "open-loop load through serve at these `RATES` (chats a second, comma-separated), then up to the capacity and fairness at it; empty leaves it out")
	openFor := flag.Duration("open-duration", 10*time.Second, "how long each open-loop rate lasts")
	model := flag.Float64("model-rate", 0, "the capacity model: chats a second through serve on file, Redis and Redis Cluster storage (redis-server on PATH), per chat CPU, ledger, SSE and Redis figures; 0 leaves it out")
	clusterHosts := flag.Int("cluster-hosts", 3, "the capacity model's last run: this many serve processes on a 3-node Redis Cluster (redis-cli on PATH); 0 leaves it out")
	capacity := flag.Float64("capacity", 0, "the capacity (chats a second) fairness is measured at; 0 finds it, up from the last of -rates")
	flag.Parse()
	if *client {
		if err := runClient(*url, *sessions, *words); err != nil {
			fmt.Fprintln(os.Stderr, "load client:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Printf("load: %d sessions at once, %d words each, fake model pausing %v per chunk, GOMAXPROCS %d (%d CPUs)\n",
		*sessions, *words, *latency, runtime.GOMAXPROCS(0), runtime.NumCPU())
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	failed := false
	t := tools{bin: *bin, lean: *lean, routeDir: *routeDir}
	if *route > 0 {
		if err := routeCompare(t, *rounds, *route, *words); err != nil {
			fmt.Fprintf(os.Stderr, "load: the UI route: %v\n", err)
			failed = true
		}
	}
	if *rates != "" {
		var rs []float64
		for _, f := range strings.Split(*rates, ",") {
			r, err := strconv.ParseFloat(f, 64)
			if err != nil || r <= 0 {
				fmt.Fprintf(os.Stderr, "load: -rates: %q is not a rate\n", f)
				os.Exit(2)
			}
			rs = append(rs, r)
		}
		if err := openLoopReport(t, rs, *openFor, *words, *latency, *capacity); err != nil {
			fmt.Fprintf(os.Stderr, "load: the open-loop load: %v\n", err)
			failed = true
		}
	}
	if *model > 0 {
		if err := capacityModel(t, *model, *openFor, *words, *latency, *clusterHosts); err != nil {
			fmt.Fprintf(os.Stderr, "load: the capacity model: %v\n", err)
			failed = true
		}
	}
	for _, name := range strings.Split(*stores, ",") {
		if name == "" || *sessions == 0 {
			continue
		}
		r, err := measure(name, *sessions, *words, *latency, selfClient)
		if err != nil {
			fmt.Fprintf(os.Stderr, "load: %s: %v\n", name, err)
			failed = true
			continue
		}
		r.print()
	}
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// report is what one storage's run measured.
type report struct {
	storage              string
	sessions             int
	accept               clientReport
	handleP50, handleP99 time.Duration // the server's handling of the POSTs
	appendP50, appendP99 time.Duration
	appends              int
	idleHeap, idleStacks float64 // bytes per idle session
	goroutines           float64 // per idle session
}

func (r report) print() {
	fmt.Printf("\nstorage %s, %d sessions:\n", r.storage, r.sessions)
	fmt.Printf("  accept latency (POST to 202)   p50 %v  p99 %v  max %v\n", round(r.accept.AcceptP50), round(r.accept.AcceptP99), round(r.accept.AcceptMax))
	fmt.Printf("    of which in the handler      p50 %v  p99 %v\n", round(r.handleP50), round(r.handleP99))
	fmt.Printf("  storage append latency         p50 %v  p99 %v  (%d appends)\n", round(r.appendP50), round(r.appendP99), r.appends)
	fmt.Printf("  SSE events delivered           %d in %v: %.0f events/s (%d runs completed)\n",
		r.accept.Events, round(r.accept.Elapsed), float64(r.accept.Events)/r.accept.Elapsed.Seconds(), r.accept.Completed)
	// The goal is an idle viewer's (≤ 32 KiB, ≤ 1 goroutine); the figure
	// holds the session's own cost too.
	verdict := "within"
	if r.idleHeap+r.idleStacks > 32<<10 || r.goroutines > 1.05 {
		verdict = "ABOVE"
	}
	fmt.Printf("  memory per idle session        %.1f KiB (%.1f KiB heap + %.1f KiB stacks, its SSE viewer attached), %.1f goroutines: %s the goal of 32 KiB and 1 goroutine\n",
		(r.idleHeap+r.idleStacks)/1024, r.idleHeap/1024, r.idleStacks/1024, r.goroutines, verdict)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// timings collects durations from any goroutine.
type timings struct {
	mu sync.Mutex
	ds []time.Duration
}

func (t *timings) add(d time.Duration) {
	t.mu.Lock()
	t.ds = append(t.ds, d)
	t.mu.Unlock()
}

func (t *timings) all() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.ds)
}

// timedStore records the latency of every Append of the store under it.
type timedStore struct {
	storage.Storage
	storage.Lister
	storage.KV
	appends timings
}

func (s *timedStore) Append(ctx context.Context, id string, events ...ledger.Event) error {
	start := time.Now()
	err := s.Storage.Append(ctx, id, events...)
	s.appends.add(time.Since(start))
	return err
}

// open opens the named storage, timed, and returns it with its close.
func open(name string) (*timedStore, func(), error) {
	var st storage.Storage
	var closeStore func()
	switch name {
	case "memory":
		m := memory.New()
		st, closeStore = m, func() { m.Close() }
	case "file":
		dir, err := os.MkdirTemp("", "agentic-load")
		if err != nil {
			return nil, nil, err
		}
		f, err := file.Open(dir, file.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, nil, err
		}
		st, closeStore = f, func() { f.Close(); os.RemoveAll(dir) }
	default:
		return nil, nil, fmt.Errorf("unknown storage %q (known: file, memory)", name)
	}
	return &timedStore{Storage: st, Lister: st.(storage.Lister), KV: st.(storage.KV)}, closeStore, nil
}

// clientCmd returns the command of the client process that loads the
// server at url.
type clientCmd func(url string, sessions, words int) (*exec.Cmd, error)

// selfClient runs this program again, with -client.
func selfClient(url string, sessions, words int) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(self, "-client", "-url", url, "-sessions", fmt.Sprint(sessions), "-words", fmt.Sprint(words)), nil
}

// measure runs the load over one storage.
func measure(name string, sessions, words int, latency time.Duration, client clientCmd) (report, error) {
	rep := report{storage: name, sessions: sessions}
	store, closeStore, err := open(name)
	if err != nil {
		return rep, err
	}
	defer closeStore()
	fm, err := fakemodel.Start(fakemodel.Options{Latency: latency, ChunkSize: 1})
	if err != nil {
		return rep, err
	}
	defer fm.Close()
	// The model client's transport is provider's default one, kept here to
	// close its idle connections before the idle measurement: they are a
	// pool the host keeps for its next passes (provider.DefaultMaxIdleConns
	// connections, whatever the sessions), not a cost of each session, and
	// the fake model serving them runs in this process too.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = provider.DefaultMaxIdleConns, provider.DefaultMaxIdleConns
	model, err := provider.New(provider.Config{BaseURL: fm.URL(), APIKey: "load", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return rep, err
	}
	// Every session keeps its stream open: the stream limits (256 a
	// tenant, 32 a key by default) are raised past the sessions.
	cfg := server.Config{MaxStreams: 2*sessions + 16, Tenants: map[string]server.TenantConfig{
		"load": {Keys: []server.KeyConfig{{Hash: server.HashKey(tenantKey)}}, Models: []string{fakemodel.DefaultModel},
			RateLimit: server.RateLimitConfig{Streams: 2*sessions + 16, StreamsPerKey: 2*sessions + 16}},
	}}
	srv, err := server.New(server.Options{Config: cfg, Storage: store, Model: model, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return rep, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	var handled timings
	timed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			srv.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		srv.ServeHTTP(w, r)
		handled.add(time.Since(start))
	})
	hs := &http.Server{Handler: timed, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Close(ctx)
		hs.Close()
	}()

	base := memNow()
	baseG := runtime.NumGoroutine()
	child, err := client("http://"+ln.Addr().String(), sessions, words)
	if err != nil {
		return rep, err
	}
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return rep, err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return rep, err
	}
	if err := child.Start(); err != nil {
		return rep, err
	}
	defer child.Process.Kill()
	// The client reports once every run has ended and its viewers idle.
	if err := json.NewDecoder(stdout).Decode(&rep.accept); err != nil {
		child.Wait()
		return rep, fmt.Errorf("the client process: %w", err)
	}
	// Both sides of the closed connections end their goroutines: wait
	// until their count stops falling (5 s at most).
	tr.CloseIdleConnections()
	for last, deadline := -1, time.Now().Add(5*time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		g := runtime.NumGoroutine()
		if g == last {
			break
		}
		last = g
	}
	idle := memNow()
	rep.idleHeap = (float64(idle.HeapAlloc) - float64(base.HeapAlloc)) / float64(sessions)
	rep.idleStacks = (float64(idle.StackInuse) - float64(base.StackInuse)) / float64(sessions)
	rep.goroutines = float64(runtime.NumGoroutine()-baseG) / float64(sessions)
	stdin.Close() // the client closes its streams and exits
	if err := child.Wait(); err != nil {
		return rep, fmt.Errorf("the client process: %w", err)
	}

	times := store.appends.all()
	rep.appends = len(times)
	rep.appendP50, rep.appendP99 = percentile(times, 0.50), percentile(times, 0.99)
	posts := handled.all()
	rep.handleP50, rep.handleP99 = percentile(posts, 0.50), percentile(posts, 0.99)
	// The ledgers: every session answered once, completed.
	for i := range sessions {
		evs, err := store.Load(context.Background(), sessionKey(i))
		if err != nil {
			return rep, err
		}
		if got := kinds(evs); got != "input run-start step run-end" || evs[len(evs)-1].RunEnd.Status != ledger.RunCompleted {
			return rep, fmt.Errorf("session %d: ledger %s", i, got)
		}
	}
	if len(rep.accept.Errors) > 0 {
		return rep, fmt.Errorf("%d sessions failed, first: %s", len(rep.accept.Errors), rep.accept.Errors[0])
	}
	return rep, nil
}

// sessionKey is the tenant's session id in the storage (see storage.Prefix).
func sessionKey(i int) string { return "load:" + sessionID(i) }

func sessionID(i int) string { return fmt.Sprintf("s%05d", i) }

func kinds(evs []ledger.Event) string {
	k := make([]string, len(evs))
	for i, e := range evs {
		k[i] = string(e.Kind)
	}
	return strings.Join(k, " ")
}

// memNow returns the memory statistics after a GC: HeapAlloc is the live
// heap, StackInuse the goroutines' stacks.
func memNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// clientReport is what the client process measured.
type clientReport struct {
	AcceptP50, AcceptP99, AcceptMax time.Duration
	// Events counts the SSE events received, over Elapsed: from the
	// first message posted to the last run's end.
	Events    int
	Elapsed   time.Duration
	Completed int
	Errors    []string
}

// runClient posts a message to each of n sessions at once, follows each
// over SSE until its run ends, checks what streamed, reports on stdout,
// and keeps the streams open until stdin closes.
func runClient(url string, n, words int) error {
	text := make([]string, words)
	for i := range text {
		text[i] = fmt.Sprintf("w%d", i)
	}
	msg := strings.Join(text, " ")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0, DisableCompression: true}}
	var (
		mu      sync.Mutex
		accepts = make([]time.Duration, 0, n)
		errs    []string
		events  atomic.Int64
		done    atomic.Int64
		wg      sync.WaitGroup
		ended   = make(chan struct{}, n)
		bodies  = make([]io.Closer, n)
	)
	fail := func(i int, format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("session %d: ", i)+fmt.Sprintf(format, args...))
		mu.Unlock()
		ended <- struct{}{}
	}
	startGate := make(chan struct{})
	var first time.Time
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			body, _ := json.Marshal(map[string]string{"text": msg})
			req, _ := http.NewRequest("POST", url+"/v1/sessions/"+sessionID(i)+"/messages", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+tenantKey)
			t0 := time.Now()
			res, err := hc.Do(req)
			if err != nil {
				fail(i, "post: %v", err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			d := time.Since(t0)
			if res.StatusCode != http.StatusAccepted {
				fail(i, "post: %s", res.Status)
				return
			}
			mu.Lock()
			accepts = append(accepts, d)
			mu.Unlock()
			req, _ = http.NewRequest("GET", url+"/v1/sessions/"+sessionID(i)+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+tenantKey)
			res, err = hc.Do(req)
			if err != nil || res.StatusCode != http.StatusOK {
				fail(i, "events: %v %v", res, err)
				return
			}
			bodies[i] = res.Body
			if err := follow(res.Body, "You said: "+msg, &events); err != nil {
				fail(i, "%v", err)
				return
			}
			done.Add(1)
			ended <- struct{}{}
		}()
	}
	first = time.Now()
	close(startGate)
	for range n {
		<-ended
	}
	elapsed := time.Since(first)
	// The connections the POSTs left idle are this client's pool, not a
	// session's cost: closed before the server measures, so that what it
	// counts is each session with its viewer.
	hc.CloseIdleConnections()
	rep := clientReport{AcceptP50: percentile(accepts, 0.5), AcceptP99: percentile(accepts, 0.99), AcceptMax: percentile(accepts, 1),
		Events: int(events.Load()), Elapsed: elapsed, Completed: int(done.Load()), Errors: errs}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return err
	}
	// The viewers stay attached, idle, until the server has measured.
	io.Copy(io.Discard, os.Stdin)
	for _, b := range bodies {
		if b != nil {
			b.Close()
		}
	}
	wg.Wait()
	return nil
}

// follow reads an event stream until its run ends, checking that the
// answer streams whole, each delta where the text so far ends, and the run
// completes; the stream is left open.
func follow(body io.Reader, want string, events *atomic.Int64) error {
	sc := bufio.NewScanner(body)
	var name string
	text := map[string]string{}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			events.Add(1)
			data := []byte(strings.TrimPrefix(line, "data: "))
			switch name {
			case "snapshot":
				var snap struct {
					Transcript ledger.Transcript `json:"transcript"`
				}
				if err := json.Unmarshal(data, &snap); err != nil {
					return err
				}
				for _, it := range snap.Transcript.Items {
					if it.Kind == ledger.ItemResponse {
						text[it.ID] = it.Text
					}
					if it.Kind == ledger.ItemResponse && it.Status == ledger.StatusCompleted {
						if it.Text != want {
							return fmt.Errorf("answer %.40q…, want %.40q…", it.Text, want)
						}
						return nil // ended before the viewer attached
					}
				}
			case "progress":
				var p struct {
					Type       string `json:"type"`
					ResponseID string `json:"responseId"`
					Delta      string `json:"delta"`
					Offset     int    `json:"offset"`
					Status     string `json:"status"`
				}
				if err := json.Unmarshal(data, &p); err != nil {
					return err
				}
				switch p.Type {
				case "text":
					if have := utf8.RuneCountInString(text[p.ResponseID]); have != p.Offset {
						return fmt.Errorf("a delta at offset %d after %d characters", p.Offset, have)
					}
					text[p.ResponseID] += p.Delta
				case "run-end":
					if p.Status != string(ledger.RunCompleted) {
						return fmt.Errorf("the run ended %s", p.Status)
					}
					for _, t := range text {
						if t == want {
							return nil
						}
					}
					return fmt.Errorf("the run ended; the stream showed %v", text)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended before the run")
}
