//go:build unix

package cli_test

// The soak (make soak): three agentic-host serve processes on a Redis
// Cluster of three primaries with a replica each, clients posting at a
// steady rate, an approver, event-stream viewers that leave and come back
// with Last-Event-ID, and a bounded chaos loop that kills and pauses serve
// processes and fails Redis primaries over. At the end it checks, from the
// ledgers and the clients' records, that every accepted message was
// answered exactly once and that nothing was lost, duplicated or left
// half-done; it prints what it did and how long answers took.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/redis"
)

// soakEnv is the environment variable that runs the soak for a duration
// ("3m"); without it TestSoak skips.
const soakEnv = "AGENTIC_SOAK"

// soakSessionsEnv sets how many sessions the soak's clients post into at
// once (16 by default).
const soakSessionsEnv = "AGENTIC_SOAK_SESSIONS"

// soakLeaseTTL is the serve processes' lease ttl.
const soakLeaseTTL = 2 * time.Second

// soak is one soak run: the processes, the clients' records and the
// violations found.
type soak struct {
	t   *testing.T
	bin string
	// binOf, when set, gives host i's binary and its extra arguments
	// (the upgrade soak's two builds).
	binOf   func(i int) (bin string, args []string)
	config  string
	cluster *redistest.Cluster
	http    *http.Client

	mu    sync.Mutex
	hosts []*serveProc // nil while a host is down
	// What the clients saw.
	accepted   map[string]acceptedMsg // by message id
	latencies  []time.Duration
	violations []string
	decisions  map[string]int  // approval id → decisions this soak's approver had accepted (200)
	ledger     storage.Storage // tenant acme's view of the cluster (see store)

	kills, stops, failovers atomic.Int64
	// What the viewers saw: streams opened, text deltas applied, items
	// held against the ledger at the end.
	streams, deltas, itemsChecked atomic.Int64
	failedPublishes               atomic.Int64 // publish_post calls that failed, and said so
	// edits makes the approver edit half the calls it approves (the
	// upgrade soak); edited and editsRefused count the edits accepted,
	// and those refused while a host that does not read them lived.
	edits                bool
	edited, editsRefused atomic.Int64
	posts                *postCounter
}

// acceptedMsg is a message a host answered 202 to.
type acceptedMsg struct {
	session, key, text string
	publish            string // the title of the post it asks for, if any
	at                 time.Time
}

// postCounter is the blog publish_post posts to. Like a real one, it
// publishes a post once per Idempotency-Key (publish_post sends its call
// id), and it counts the posts of each title: a post published twice is
// one tool call run twice under two ids.
type postCounter struct {
	mu      sync.Mutex
	byTitle map[string]map[string]bool // title → idempotency keys
}

func (p *postCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Title string `json:"title"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	if p.byTitle[body.Title] == nil {
		p.byTitle[body.Title] = map[string]bool{}
	}
	p.byTitle[body.Title][r.Header.Get("Idempotency-Key")] = true
	n := len(p.byTitle[body.Title])
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"post-%s-%d","url":"https://blog.example/%s"}`, body.Title, n, body.Title)
}

func (s *soak) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// pick returns a running host at random (nil when none is up).
func (s *soak) pick() *serveProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var up []*serveProc
	for _, h := range s.hosts {
		if h != nil {
			up = append(up, h)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rand.IntN(len(up))]
}

// call sends a request to a running host and returns its status and body;
// a transport error (a host killed or paused) is status 0.
func (s *soak) call(ctx context.Context, h *serveProc, method, path, body string, header ...string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, h.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+serveKey)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := s.http.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil
	}
	return res.StatusCode, b
}

// TestSoak is make soak. Set AGENTIC_SOAK to its duration ("3m").
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil {
		t.Skipf("set %s to a duration (make soak sets 3m) to run the soak", soakEnv)
	}
	bin := needBinary(t)
	s := &soak{t: t, bin: bin, accepted: map[string]acceptedMsg{}, decisions: map[string]int{},
		http:  &http.Client{Timeout: 8 * time.Second},
		posts: &postCounter{byTitle: map[string]map[string]bool{}}}
	s.cluster = redistest.StartClusterWith(t, redistest.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second,
		AppendOnly: true, Args: []string{"--cluster-require-full-coverage", "no"}})
	s.setup(3)
	runSoak(t, s, d, s.chaos)
}

// setup writes the configuration (the plugins, the blog, the model) and
// starts n hosts.
func (s *soak) setup(n int) {
	t := s.t
	blog := httptest.NewServer(s.posts)
	t.Cleanup(blog.Close)
	blogURL, _ := url.Parse(blog.URL)
	model, err := fakemodel.Start(fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins", "acme")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"publish_post": "../../examples/plugins/publish_post", "get_account": "../../examples/plugins/get_account"} {
		if err := os.WriteFile(filepath.Join(plugins, name+".wasm"), plugintest.GoPlugin(t, src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`storage: redis+cluster://%s?wait_replicas=1
plugins_dir: %s
plugin_cache_dir: %s
lease_ttl: %s
# A host that dies or stalls past its lease while it resumes a run counts
# one of the run's resume attempts (the guard against a run that kills its
# host every time). The chaos kills or pauses a host every 12 s, and once
# in five soaks hit the same run's resuming hosts three times in 7 s: the
# default bound, 3, then gave the run up. The soak is about faults of the
# infrastructure, not runs that crash hosts: a bound past its reach.
resume_max_attempts: 8
model:
  base_url: %s
tenants:
  acme:
    keys: [%q]
    models: [fake/echo]
    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
      kv: true
      compile_timeout: 5m
    plugin_config:
      publish_post:
        endpoint: %s/posts
`, strings.Join(s.cluster.Addrs(), ","), filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "soak-serve"),
		soakLeaseTTL, model.URL(), server.HashKey(serveKey), blogURL.Host, blog.URL)
	s.config = filepath.Join(dir, "agentic.yaml")
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.hosts = make([]*serveProc, n)
	for i := range s.hosts {
		s.hosts[i] = s.startHost(i)
	}
}

// startHost starts host i (of the binary binOf gives, else s.bin) and
// waits until its plugins are loaded.
func (s *soak) startHost(i int) *serveProc {
	bin, args := s.bin, []string{"--set", fmt.Sprintf("host_id=h%d", i)}
	if s.binOf != nil {
		var more []string
		bin, more = s.binOf(i)
		args = append(args, more...)
	}
	h := startServe(s.t, fmt.Sprintf("h%d", i), bin, s.config, args...)
	waitPlugins(h, 2)
	return h
}

// runSoak drives the clients and the faults (the chaos, or a deploy) for
// d, then waits for what was accepted to be answered, checks and reports.
func runSoak(t *testing.T, s *soak, d time.Duration, faults func(ctx context.Context, d time.Duration)) {
	sessions, viewers := 16, 4
	if n, err := strconv.Atoi(os.Getenv(soakSessionsEnv)); err == nil && n > 0 {
		sessions = n
	}
	started := time.Now()
	posting, stopPosting := context.WithTimeout(context.Background(), d)
	defer stopPosting()
	done, stopAll := context.WithCancel(context.Background())
	defer stopAll()

	var clients sync.WaitGroup
	for i := range sessions {
		clients.Go(func() { s.client(posting, fmt.Sprintf("soak-%d", i)) })
	}
	var others sync.WaitGroup
	others.Go(func() { s.approver(done) })
	for i := range viewers {
		others.Go(func() { s.viewer(done, i, sessions) })
	}
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		faults(posting, d)
	}()
	<-chaosDone
	clients.Wait() // each waits for its last accepted message's answer
	stopAll()
	others.Wait()
	s.check(sessions)
	s.report(time.Since(started), sessions)
}

// client posts messages into session at a steady rate, whether or not the
// earlier ones were answered (so messages queue into runs in flight, into
// runs parked for approval, and into runs whose host just died): plain
// text, a read tool (get_account), an external tool (publish_post, which
// waits for the approver). A post that fails on the way (a host killed or
// paused, a storage failover) is sent again, with the same
// Idempotency-Key, to another host. Then it waits for every message it got
// a 202 for to be answered.
func (s *soak) client(ctx context.Context, session string) {
	answered, posted := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(answered)
		s.answers(posted, session)
	}()
	defer func() {
		close(posted)
		<-answered
	}()
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s-%d", session, i)
		msg := acceptedMsg{session: session, key: key}
		switch i % 4 {
		case 0, 1:
			msg.text = fmt.Sprintf("%s %s", key, words("w", 10+rand.IntN(30)))
		case 2:
			msg.text = fmt.Sprintf("get_account account_id=%d", 1+rand.IntN(999))
		case 3:
			msg.publish = key
			msg.text = fmt.Sprintf("publish_post title=%s body=soak", key)
		}
		body, _ := json.Marshal(map[string]string{"text": msg.text})
		var msgID string
		for deadline := time.Now().Add(60 * time.Second); msgID == ""; {
			if time.Now().After(deadline) {
				s.violate("no host accepted %s within 60s", key)
				return
			}
			h := s.pick()
			if h == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			code, b := s.call(context.Background(), h, "POST", "/v1/sessions/"+session+"/messages", string(body), "Idempotency-Key", key)
			switch {
			case code == http.StatusAccepted:
				var res struct {
					MessageID string `json:"message_id"`
				}
				json.Unmarshal(b, &res)
				msgID = res.MessageID
			case code == 0 || code >= 500 || code == http.StatusTooManyRequests:
				time.Sleep(100 * time.Millisecond) // another host, or a moment later
			default:
				s.violate("POST %s to %s: %d %s", key, h.name, code, b)
				return
			}
		}
		msg.at = time.Now()
		s.mu.Lock()
		if prev, ok := s.accepted[msgID]; ok && prev.key != key {
			s.violate("%s: message %s was accepted for %s and for %s", session, msgID, prev.key, key)
		}
		s.accepted[msgID] = msg
		s.mu.Unlock()
		time.Sleep(time.Duration(300+rand.IntN(1500)) * time.Millisecond)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// answers follows the session's transcript on random hosts, and records
// the time each accepted message took to be answered (a completed response
// follows it), until posted is closed and every message was answered, or
// 90s after posted was closed.
func (s *soak) answers(posted <-chan struct{}, session string) {
	answered := map[string]bool{}
	var deadline time.Time
	for {
		time.Sleep(150 * time.Millisecond)
		s.mu.Lock()
		var waiting []string
		for id, m := range s.accepted {
			if m.session == session && !answered[id] {
				waiting = append(waiting, id)
			}
		}
		s.mu.Unlock()
		if isClosed(posted) {
			if deadline.IsZero() {
				deadline = time.Now().Add(90 * time.Second)
			}
			if len(waiting) == 0 {
				return
			}
			if time.Now().After(deadline) {
				for _, id := range waiting {
					s.violate("%s: message %s was not answered within 90s of the end of posting", session, id)
				}
				return
			}
		}
		h := s.pick()
		if h == nil || len(waiting) == 0 {
			continue
		}
		code, b := s.call(context.Background(), h, "GET", "/v1/sessions/"+session+"/transcript", "")
		var tr wireTranscript
		if code != http.StatusOK || json.Unmarshal(b, &tr) != nil {
			continue
		}
		now := time.Now()
		for _, id := range waiting {
			at := slices.IndexFunc(tr.Items, func(it wireItem) bool { return it.ID == id })
			if at < 0 || !slices.ContainsFunc(tr.Items[at+1:], func(it wireItem) bool { return it.Kind == "response" && it.Status == "completed" }) {
				continue
			}
			answered[id] = true
			s.mu.Lock()
			s.latencies = append(s.latencies, now.Sub(s.accepted[id].at))
			s.mu.Unlock()
		}
	}
}

// approver approves every pending request it finds, through any host.
func (s *soak) approver(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(300 * time.Millisecond)
		h := s.pick()
		if h == nil {
			continue
		}
		code, b := s.call(ctx, h, "GET", "/v1/approvals", "")
		var inbox struct {
			Approvals []struct {
				consoleApproval
				Input json.RawMessage `json:"input"`
			} `json:"approvals"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &inbox) != nil {
			continue
		}
		for _, a := range inbox.Approvals {
			if d := s.pick(); d != nil {
				decision := `{"approve":true,"by":"soak"}`
				if edit := s.editOf(a.Input); s.edits && edit != "" && rand.IntN(2) == 0 {
					// An edit, which the hosts write only once every
					// live one reads it: refused meanwhile, then an
					// approval as it was asked.
					code, b := s.call(ctx, d, "POST", "/v1/approvals/"+a.ApprovalID, edit)
					if code == http.StatusOK {
						s.edited.Add(1)
						s.mu.Lock()
						s.decisions[a.ApprovalID]++
						s.mu.Unlock()
						continue
					}
					if code != http.StatusConflict || !strings.Contains(string(b), `"feature_unavailable"`) {
						continue // as below: the ledger tells
					}
					s.editsRefused.Add(1)
				}
				code, b := s.call(ctx, d, "POST", "/v1/approvals/"+a.ApprovalID, decision)
				switch code {
				case http.StatusOK:
					s.mu.Lock()
					s.decisions[a.ApprovalID]++
					s.mu.Unlock()
				case 0, http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable:
					// Lost on the way, decided meanwhile by an
					// earlier try, or not recorded while the storage
					// failed over (the next poll decides it again):
					// the ledger tells.
				default:
					s.violate("approve %s on %s: %d %s", a.ApprovalID, d.name, code, b)
				}
			}
		}
	}
}

// editOf returns the body of a decision that edits a publish_post call's
// input (its body, not its title, so that the blog still counts one post
// per title), or "" for another input.
func (s *soak) editOf(input json.RawMessage) string {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil || in["title"] == nil {
		return ""
	}
	in["body"] = "soak, edited"
	b, _ := json.Marshal(map[string]any{"approve": true, "by": "soak", "input": in})
	return string(b)
}

// viewer follows random sessions' event streams on random hosts, a few
// seconds at a time, coming back with the Last-Event-ID it read: every text
// delta must start where the item's text ends (no character twice or
// missing), and an item whose run it saw end completed must hold the text
// the ledger holds.
func (s *soak) viewer(ctx context.Context, n, sessions int) {
	texts := map[string]map[string]string{} // session → item → text
	lastID := map[string]string{}
	final := map[string]map[string]bool{} // session → items seen to their run's completed end
	for ctx.Err() == nil {
		session := fmt.Sprintf("soak-%d", rand.IntN(sessions))
		h := s.pick()
		if h == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if texts[session] == nil {
			texts[session], final[session] = map[string]string{}, map[string]bool{}
		}
		rctx, cancel := context.WithTimeout(ctx, time.Duration(1000+rand.IntN(3000))*time.Millisecond)
		req, _ := http.NewRequestWithContext(rctx, "GET", h.url+"/v1/sessions/"+session+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+serveKey)
		if id := lastID[session]; id != "" {
			req.Header.Set("Last-Event-ID", id)
		}
		res, err := (&http.Client{}).Do(req)
		if err != nil {
			cancel()
			continue
		}
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			cancel()
			continue
		}
		s.streams.Add(1)
		runItems := map[string][]string{} // run → items its progress streamed into
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				e.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
			case line == "" && e.data != nil:
				s.apply(n, session, h.name, e, texts[session], final[session], runItems)
				if e.id != "" {
					lastID[session] = e.id
				}
				e = sseEvent{}
			}
		}
		res.Body.Close()
		cancel()
	}
	// What it saw to the end must be what the ledger holds.
	for session, items := range final {
		want := s.ledgerTexts(session)
		for id := range items {
			s.itemsChecked.Add(1)
			if got := texts[session][id]; got != want[id] {
				s.violate("viewer %d: item %s of %s shows %.60q…, the ledger %.60q…", n, id, session, got, want[id])
			}
		}
	}
}

// apply is one event of a viewer's stream.
func (s *soak) apply(n int, session, host string, e sseEvent, text map[string]string, final map[string]bool, runItems map[string][]string) {
	switch e.name {
	case "snapshot":
		var snap struct {
			Transcript wireTranscript `json:"transcript"`
		}
		if json.Unmarshal(e.data, &snap) != nil {
			s.violate("viewer %d: a snapshot of %s on %s does not decode", n, session, host)
			return
		}
		for _, it := range snap.Transcript.Items {
			if it.Kind == "response" {
				text[it.ID] = it.Text
			}
		}
	case "progress":
		p := e.progress()
		switch {
		case p.Type == "retry" && p.Retry != nil && p.Retry.Reset:
			text[p.ResponseID] = ""
		case p.Type == "text":
			if have := utf8.RuneCountInString(text[p.ResponseID]); p.Offset != have {
				s.violate("viewer %d: on %s, a delta of %s (%s) at offset %d, where its text has %d characters", n, host, p.ResponseID, session, p.Offset, have)
				text[p.ResponseID] = "" // count it once
				return
			}
			text[p.ResponseID] += p.Delta
			s.deltas.Add(1)
			if !slices.Contains(runItems[p.RunID], p.ResponseID) {
				runItems[p.RunID] = append(runItems[p.RunID], p.ResponseID)
			}
		case p.Type == "run-end" && p.Status == "completed":
			for _, id := range runItems[p.RunID] {
				final[id] = true
			}
		}
	}
}

// ledgerTexts returns the text of each response item of the session, from
// its ledger.
func (s *soak) ledgerTexts(session string) map[string]string {
	out := map[string]string{}
	evs, err := s.store().Load(context.Background(), session)
	if err != nil {
		s.violate("load %s: %v", session, err)
		return out
	}
	for _, it := range ledger.ProjectSession(session, evs).Items {
		out[it.ID] = it.Text
	}
	return out
}

// store returns tenant acme's view of the cluster, as the hosts keep it.
func (s *soak) store() storage.Storage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ledger == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := redis.Open(ctx, "redis+cluster://"+strings.Join(s.cluster.Addrs(), ","), redis.Options{})
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { st.Close() })
		if s.ledger, err = storage.Prefix(st, "acme:"); err != nil {
			s.t.Fatal(err)
		}
	}
	return s.ledger
}

// chaos does one fault every few seconds while the clients post, in turn:
// SIGKILL a host (and start it again), SIGSTOP one past its lease (and
// continue it), SIGKILL a Redis primary (its replica takes over; the node
// comes back from its append-only file as a replica).
func (s *soak) chaos(ctx context.Context, d time.Duration) {
	every := max(d/15, 8*time.Second)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		switch i % 3 {
		case 0:
			s.killHost()
		case 1:
			s.pauseHost()
		case 2:
			s.failover()
		}
	}
}

func (s *soak) victim() (int, *serveProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := rand.IntN(len(s.hosts))
	return i, s.hosts[i]
}

// killHost SIGKILLs a host, and starts it again a second later.
func (s *soak) killHost() {
	i, h := s.victim()
	if h == nil {
		return
	}
	s.mu.Lock()
	s.hosts[i] = nil
	s.mu.Unlock()
	h.signal(syscall.SIGKILL)
	h.wait(10 * time.Second)
	s.kills.Add(1)
	s.t.Logf("chaos: killed %s", h.name)
	time.Sleep(time.Second)
	n := s.startHost(i)
	s.mu.Lock()
	s.hosts[i] = n
	s.mu.Unlock()
}

// pauseHost stops a host for longer than its lease, then continues it.
func (s *soak) pauseHost() {
	_, h := s.victim()
	if h == nil {
		return
	}
	h.signal(syscall.SIGSTOP)
	s.stops.Add(1)
	s.t.Logf("chaos: paused %s", h.name)
	time.Sleep(soakLeaseTTL + 1500*time.Millisecond)
	h.signal(syscall.SIGCONT)
}

// failover SIGKILLs a Redis primary, waits until its replica took over,
// and restarts it (from its append-only file: it comes back a replica).
func (s *soak) failover() {
	primaries := s.cluster.Primaries()
	if len(primaries) == 0 {
		return
	}
	p := primaries[rand.IntN(len(primaries))]
	p.Kill()
	s.failovers.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.cluster.WaitHealthy(ctx); err != nil {
		s.violate("the cluster did not fail over: %v", err)
		return
	}
	s.t.Logf("chaos: killed primary %s; its replica took over in %v", p.Addr(), time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	p.Restart()
	if err := s.cluster.WaitHealthy(ctx); err != nil {
		s.violate("the killed primary did not come back as a replica: %v", err)
	}
}

// check reads every session's ledger and holds it against the clients'
// records.
func (s *soak) check(sessions int) {
	byTitle := map[string]int{}
	s.posts.mu.Lock()
	for k, v := range s.posts.byTitle {
		byTitle[k] = len(v)
	}
	s.posts.mu.Unlock()
	for i := range sessions {
		session := fmt.Sprintf("soak-%d", i)
		evs, err := s.store().Load(context.Background(), session)
		if err != nil {
			s.violate("load %s: %v", session, err)
			continue
		}
		s.mu.Lock()
		before := len(s.violations)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			after := len(s.violations)
			s.mu.Unlock()
			if after > before {
				s.describe(session, evs)
			}
		}()
		ids := map[string]bool{}
		inputs := map[string]int{}   // message id → input events
		requests := map[string]int{} // request id → distinct messages
		for _, e := range evs {
			if ids[e.ID] {
				s.violate("%s: event %s (%s) is in the ledger twice", session, e.ID, e.Kind)
			}
			ids[e.ID] = true
			if e.Input != nil {
				if inputs[e.Input.MessageID] == 0 && e.Input.RequestID != "" {
					requests[e.Input.RequestID]++
				}
				inputs[e.Input.MessageID]++
			}
		}
		for key, n := range requests {
			if n > 1 {
				s.violate("%s: the message posted with Idempotency-Key %s is in the ledger as %d messages", session, key, n)
			}
		}
		if open := ledger.OpenRuns(evs); len(open) > 0 {
			s.violate("%s: runs left open: %v", session, open)
		}
		if pending := ledger.PendingInputs(evs); len(pending) > 0 {
			s.violate("%s: messages never answered: %v", session, pending)
		}
		// Every message is answered: a completed response follows it. A
		// message that started its run (not queued into one) is answered
		// by that run's first pass, in the item that follows it — also
		// when another host took the run over and messages were queued
		// meanwhile.
		started := map[string]bool{}
		for _, e := range evs {
			if e.Input != nil && e.RunID != "" {
				started[e.Input.MessageID] = true
			}
		}
		tr := ledger.ProjectSession(session, evs)
		for j, it := range tr.Items {
			switch it.Kind {
			case ledger.ItemUser:
				if !slices.ContainsFunc(tr.Items[j+1:], func(r ledger.Item) bool { return r.Kind == ledger.ItemResponse }) {
					s.violate("%s: message %s has no answer", session, it.ID)
				} else if started[it.ID] && tr.Items[j+1].Kind != ledger.ItemResponse {
					s.violate("%s: message %s, which started its run, is not answered by its first pass (the next item is message %s)", session, it.ID, tr.Items[j+1].ID)
				}
			case ledger.ItemResponse:
				if it.Status != ledger.StatusCompleted {
					s.violate("%s: response %s is %s", session, it.ID, it.Status)
				}
			}
		}
		for _, a := range ledger.Approvals(evs, "") {
			decisions := 0
			for _, e := range evs {
				if e.ApprovalDecision != nil && e.ApprovalDecision.ApprovalID == a.Request.ApprovalID {
					decisions++
				}
			}
			if decisions != 1 || a.Decision == nil || (a.Decision.Decision != ledger.DecisionApprove && (!s.edits || a.Decision.Decision != ledger.DecisionEdit)) {
				s.violate("%s: approval %s has %d decisions (%+v), want one approval (or edit)", session, a.Request.ApprovalID, decisions, a.Decision)
			}
		}
		// publish_post's results, by title: a call that says it
		// published must have; one that failed (storage failing over
		// under its idempotency record, say) says so to the model.
		published := map[string]bool{}
		failures := map[string]string{} // title → what a failed call told the model
		calls := map[string]string{}    // call id → title
		for _, e := range evs {
			if e.Step != nil {
				for _, c := range e.Step.ToolCalls {
					var in struct{ Title string }
					if c.Name == "publish_post" && json.Unmarshal([]byte(c.Arguments), &in) == nil {
						calls[c.ID] = in.Title
					}
				}
			}
			if r := e.ToolResult; r != nil && r.Name == "publish_post" && !r.IsError {
				published[calls[r.CallID]] = true
			} else if r != nil && r.Name == "publish_post" {
				failures[calls[r.CallID]] = r.Output
			}
		}
		s.mu.Lock()
		accepted := maps.Clone(s.accepted)
		s.mu.Unlock()
		for id, m := range accepted {
			if m.session != session {
				continue
			}
			if inputs[id] != 1 {
				s.violate("%s: accepted message %s (%s) is in the ledger %d times", session, id, m.key, inputs[id])
			}
			switch {
			case m.publish == "":
			case published[m.publish] && byTitle[m.publish] != 1:
				s.violate("%s: publish_post says it published %s, which was published %d times", session, m.publish, byTitle[m.publish])
			case !published[m.publish]:
				if s.failedPublishes.Add(1) <= 3 {
					why, ok := failures[m.publish]
					if !ok {
						why = "(no publish_post result)"
					}
					s.t.Logf("%s: %s was not published: %.300s", session, m.publish, why)
				}
			}
		}
	}
	for title, n := range byTitle {
		if n > 1 {
			s.violate("post %s was published %d times", title, n)
		}
	}
}

// describe logs what a session's ledger holds, for a violation's reader.
func (s *soak) describe(session string, evs []ledger.Event) {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s %s run=%s", e.Time.Format("15:04:05.000"), e.Kind, e.RunID)
		switch {
		case e.Input != nil:
			fmt.Fprintf(&b, " msg=%s req=%s %.50q", e.Input.MessageID, e.Input.RequestID, ledger.TextOf(e.Input.Parts))
		case e.Step != nil:
			fmt.Fprintf(&b, " resp=%s inputs=%v calls=%d %.50q", e.Step.ResponseID, e.Step.Inputs, len(e.Step.ToolCalls), e.Step.Text)
		case e.ToolResult != nil:
			fmt.Fprintf(&b, " %s error=%v %.80q", e.ToolResult.Name, e.ToolResult.IsError, e.ToolResult.Output)
		case e.RunEnd != nil:
			fmt.Fprintf(&b, " %s %q", e.RunEnd.Status, e.RunEnd.Reason)
		case e.ResumeAttempt != nil:
			fmt.Fprintf(&b, " by %s #%d", e.ResumeAttempt.Host, e.ResumeAttempt.Attempt)
		}
	}
	s.t.Logf("the ledger of %s:%s", session, b.String())
}

// report prints the soak's figures, and fails the test on any violation.
func (s *soak) report(took time.Duration, sessions int) {
	takeovers := 0
	for i := range sessions {
		evs, err := s.store().Load(context.Background(), fmt.Sprintf("soak-%d", i))
		if err == nil {
			takeovers += hosttest.CountKind(evs, ledger.KindResumeAttempt)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lat := slices.Clone(s.latencies)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	approved := 0
	for _, n := range s.decisions {
		approved += n
	}
	fmt.Printf("soak: %v, %d sessions: %d accepted, %d answered, %d approvals decided, %d takeovers (resume attempts), %d hosts killed, %d paused past their lease, %d Redis failovers; "+
		"%d publish_post calls failed and told the model; viewers: %d streams, %d deltas, %d items held against the ledger; time to answer p50 %v, p99 %v, max %v; %d violations\n",
		took.Round(time.Second), sessions, len(s.accepted), len(lat), approved, takeovers, s.kills.Load(), s.stops.Load(), s.failovers.Load(), s.failedPublishes.Load(),
		s.streams.Load(), s.deltas.Load(), s.itemsChecked.Load(), pct(0.5), pct(0.99), pct(1), len(s.violations))
	for _, v := range s.violations {
		s.t.Error(v)
	}
}
