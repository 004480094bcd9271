//go:build unix

package cli_test

// agentic-host serve as real processes: two serve processes on one real
// redis-server share a tenant's sessions (a message posted to one joins the
// run the other leads; SIGKILL one and the other resumes its run), and
// SIGTERM drains a serve process (it refuses work, its runs stop at a step
// boundary, and the next process resumes them).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/cli"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// serveKey is the API key of tenant acme in the tests' configurations.
const serveKey = "ak_test_serve_acme"

// writeServeConfig writes a serve configuration of one tenant, acme, with
// serveKey, over storage, answered by the model at modelURL, and returns
// its path. extra is appended to the YAML as it is.
func writeServeConfig(t *testing.T, storageURL, modelURL, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`storage: %s
model:
  base_url: %s
tenants:
  acme:
    keys: [%q]
    models: [fake/echo]
%s`, storageURL, modelURL, server.HashKey(serveKey), extra)
	path := filepath.Join(t.TempDir(), "agentic.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveProc is a running agentic-host serve process.
type serveProc struct {
	*proc
	url string // http://ADDR
	key string // the API key requests present; default serveKey
}

// startServe starts agentic-host serve with the configuration at config
// on a free port, and waits until it listens.
func startServe(t *testing.T, name, bin, config string, args ...string) *serveProc {
	t.Helper()
	p := startProc(t, name, bin, append([]string{"serve", "--config", config, "--listen", "127.0.0.1:0"}, args...)...)
	const banner = "listening on http://"
	p.waitOut(banner, 30*time.Second)
	out := p.out.String()
	addr, _, _ := strings.Cut(out[strings.Index(out, banner)+len(banner):], "\n")
	return &serveProc{proc: p, url: "http://" + strings.TrimSpace(addr), key: serveKey}
}

// do sends a request with the tenant's key and returns the status and the
// body; err is a transport error (the process is gone).
func (s *serveProc) do(method, path, body string, header ...string) (int, string, error) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// must is do that fails the test on a transport error or another status
// than want, and decodes the body into out (when not nil).
func (s *serveProc) must(method, path, body string, want int, out any) string {
	s.t.Helper()
	code, b, err := s.do(method, path, body)
	if err != nil || code != want {
		s.t.Fatalf("%s: %s %s: %d %v %s (want %d)", s.name, method, path, code, err, b, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			s.t.Fatalf("%s: %s %s: %v: %s", s.name, method, path, err, b)
		}
	}
	return b
}

// post posts a message to the session and returns the answer's ids.
func (s *serveProc) post(session, text string) (msgID, runID string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	var res struct {
		MessageID string `json:"message_id"`
		RunID     string `json:"run_id"`
	}
	s.must("POST", "/v1/sessions/"+session+"/messages", string(body), http.StatusAccepted, &res)
	return res.MessageID, res.RunID
}

// state returns the session's state as the process reports it.
func (s *serveProc) state(session string) string {
	s.t.Helper()
	var res struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	s.must("GET", "/v1/sessions/"+session, "", http.StatusOK, &res)
	return res.Status.State
}

// waitState waits until the session's state is want.
func (s *serveProc) waitState(session, want string, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := s.state(session)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: session %s is %s after %v, want %s", s.name, session, got, d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// transcript returns the session's transcript from the process.
func (s *serveProc) transcript(session string) wireTranscript {
	s.t.Helper()
	var tr wireTranscript
	s.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, &tr)
	return tr
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name, id string
	data     json.RawMessage
}

// progress decodes a progress event's data.
func (e sseEvent) progress() (p struct {
	Type       string `json:"type"`
	RunID      string `json:"runId"`
	ResponseID string `json:"responseId"`
	Delta      string `json:"delta"`
	Offset     int    `json:"offset"`
	Status     string `json:"status"`
	Retry      *struct {
		Reset bool `json:"reset"`
	} `json:"retry"`
}) {
	json.Unmarshal(e.data, &p)
	return p
}

// events opens the session's event stream on the process: its events
// arrive on the channel, which closes when the stream ends.
func (s *serveProc) events(session string) <-chan sseEvent {
	s.t.Helper()
	return s.eventsAfter(session, "")
}

// eventsAfter follows the session's events from the event id after
// (Last-Event-ID; "" for the start), until the stream ends.
func (s *serveProc) eventsAfter(session, after string) <-chan sseEvent {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/sessions/"+session+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s: events of %s: %v", s.name, session, err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		s.t.Fatalf("%s: events of %s: %d %s", s.name, session, res.StatusCode, b)
	}
	ch := make(chan sseEvent, 4096)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.data != nil {
					select {
					case ch <- e:
					case <-ctx.Done():
						return
					}
				}
				e = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				e.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return ch
}

// viewer is what a client following an event stream shows: the text of
// each response item, as snapshots set it and progress extends it.
type viewer struct {
	t    *testing.T
	ch   <-chan sseEvent
	text map[string]string // by response item id
	done bool              // the last run seen ended completed
}

func (s *serveProc) viewer(session string) *viewer {
	return &viewer{t: s.t, ch: s.events(session), text: map[string]string{}}
}

// read applies the stream's events until until reports true; it fails the
// test when the stream ends first or d passes, and when a text delta does
// not start where the item's text ends (a character twice or missing).
func (v *viewer) read(d time.Duration, what string, until func(sseEvent) bool) {
	v.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e, ok := <-v.ch:
			if !ok {
				v.t.Fatalf("the event stream ended before %s", what)
			}
			switch e.name {
			case "snapshot":
				var snap struct {
					Transcript wireTranscript `json:"transcript"`
				}
				if err := json.Unmarshal(e.data, &snap); err != nil {
					v.t.Fatalf("snapshot: %v", err)
				}
				for _, it := range snap.Transcript.Items {
					if it.Kind == "response" {
						v.text[it.ID] = it.Text
						v.done = it.Status == "completed"
					}
				}
			case "progress":
				p := e.progress()
				switch {
				case p.Type == "retry" && p.Retry != nil && p.Retry.Reset:
					v.text[p.ResponseID] = ""
				case p.Type == "response-start":
					v.done = false
				case p.Type == "run-end":
					v.done = p.Status == "completed"
				case p.Type == "text":
					if have := utf8.RuneCountInString(v.text[p.ResponseID]); p.Offset != have {
						v.t.Errorf("a delta of %s at offset %d, where its text has %d characters", p.ResponseID, p.Offset, have)
					}
					v.text[p.ResponseID] += p.Delta
				}
			}
			if until(e) {
				return
			}
		case <-timeout:
			v.t.Fatalf("no %s within %v", what, d)
		}
	}
}

// closes reads the stream's events until it ends; it fails the test when
// d passes first.
func (v *viewer) closes(d time.Duration) {
	v.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-v.ch:
			if !ok {
				return
			}
		case <-timeout:
			v.t.Fatalf("the event stream is still open after %v", d)
		}
	}
}

// completed reports whether the last run the viewer saw ended completed
// (a run-end, or a snapshot whose last response is completed).
func (v *viewer) completed() bool { return v.done }

// startsWith reports whether an item's text starts with prefix.
func (v *viewer) startsWith(prefix string) bool {
	for _, s := range v.text {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// tenantLedger opens tenant acme's view of the Redis storage, as the
// server keeps it.
func tenantLedger(t *testing.T, url string) storage.Storage {
	t.Helper()
	s, err := storage.Prefix(ledgerOf(t, url), "acme:")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeTwoHostsRedis: two agentic-host serve processes, A and B, with
// one configuration on one redis-server. A streams a long reply over SSE;
// a message posted to B meanwhile (?wait=true) joins the run A leads and is
// answered in it (A streams the answer); A is SIGKILLed while it streams
// that answer, and B, once A's lease lapses, resumes the run — once — and
// completes it: the waiting POST gets the answer from that run. B's
// transcript then holds every item once, each of A's run, with no text
// twice; a viewer attached to B follows the run B took over to its end,
// with no character twice or missing.
func TestServeTwoHostsRedis(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	store := tenantLedger(t, rds.URL())
	config := writeServeConfig(t, rds.URL(), model.URL(), "lease_ttl: 2s\n")
	a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
	b := startServe(t, "B", bin, config, "--set", "host_id=host-b")
	first, second := words("a", 300), words("b", 300)
	// A's two passes pause mid-stream, whatever the machine's speed: the
	// first until the message to B is durable, the second for good (A is
	// killed in it). The pass B resumes is the model's echo.
	firstHeld, secondHeld := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(secondHeld) })
	model.Enqueue(fakemodel.Reply{Text: "You said: " + first, Hold: firstHeld, HoldAfter: 10},
		fakemodel.Reply{Text: "You said: " + second, Hold: secondHeld, HoldAfter: 10})

	_, runID := a.post("s", first)
	if runID == "" {
		t.Fatal("A started no run")
	}
	onA := a.viewer("s")
	onA.read(20*time.Second, "A's reply streaming", func(sseEvent) bool { return onA.startsWith("You said: a0 a1 a2") })
	onB := b.viewer("s")
	if got := b.state("s"); got != "running" {
		t.Fatalf("B says the session is %s while A streams its reply", got)
	}
	type reply struct {
		code int
		body string
		err  error
	}
	waited := make(chan reply, 1)
	go func() {
		body, _ := json.Marshal(map[string]string{"text": second})
		code, res, err := b.do("POST", "/v1/sessions/s/messages?wait=true", string(body), "Idempotency-Key", "second")
		waited <- reply{code, res, err}
	}()
	var msgID string
	for deadline := time.Now().Add(10 * time.Second); msgID == ""; time.Sleep(5 * time.Millisecond) {
		for _, e := range hosttest.Load(t, store, "s") {
			if e.Input != nil && e.Input.RequestID == "second" {
				msgID = e.Input.MessageID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the message posted to B is not in the ledger")
		}
	}
	if evs := hosttest.Load(t, store, "s"); hosttest.Settled(evs) || hosttest.CountKind(evs, ledger.KindStep) != 0 {
		t.Fatalf("A's first pass ended while the model held it: %s", hosttest.Kinds(evs))
	}
	close(firstHeld)

	// A folds the message in at its next step boundary and streams its
	// answer, in the same run.
	var answer string
	onA.read(30*time.Second, "A streaming the answer to the message posted to B", func(e sseEvent) bool {
		if e.name != "progress" {
			return false
		}
		p := e.progress()
		if p.RunID != runID {
			t.Fatalf("progress of run %s on A, want run %s", p.RunID, runID)
		}
		if p.Type == "run-end" {
			t.Fatalf("A's run ended (%s) before it answered the message posted to B", p.Status)
		}
		answer = p.ResponseID
		return strings.HasPrefix(onA.text[answer], "You said: b0 b1 b2")
	})
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	killed := time.Now()
	if evs := hosttest.Load(t, store, "s"); hosttest.CountKind(evs, ledger.KindResumeAttempt) != 0 {
		t.Fatalf("B resumed the run before A died: %s", hosttest.Kinds(evs))
	}

	// B takes over once A's lease lapses (its sweeps repeat every lease
	// ttl), and its viewer follows the run it resumed to its end.
	var end string
	onB.read(60*time.Second, "the run's end on B's event stream", func(e sseEvent) bool {
		if p := e.progress(); e.name == "progress" && p.Type == "run-end" {
			end = p.Status
			return true
		}
		return false
	})
	t.Logf("B completed the run %v after A was killed", time.Since(killed).Round(time.Millisecond))
	if end != "completed" {
		t.Errorf("B's viewer saw the run end %q", end)
	}
	if got := onB.text[answer]; got != "You said: "+second {
		t.Errorf("B's viewer shows %.60q… in %s, want the whole answer", got, answer)
	}
	b.waitState("s", "completed", 10*time.Second)
	// The POST that waited on B for its answer gets it from the run B
	// resumed.
	w := <-waited
	var res struct {
		MessageID string `json:"message_id"`
		RunID     string `json:"run_id"`
		Status    string `json:"status"`
		Text      string `json:"text"`
	}
	if w.err != nil || w.code != http.StatusOK || json.Unmarshal([]byte(w.body), &res) != nil || res.MessageID != msgID ||
		res.RunID != runID || res.Status != "completed" || res.Text != "You said: "+second {
		t.Errorf("the POST ?wait=true to B: %d %v %.200s…; want message %s answered by run %s, completed", w.code, w.err, w.body, msgID, runID)
	}

	evs := hosttest.Load(t, store, "s")
	if got, want := hosttest.Kinds(evs), "input run-start input step resume-attempt step run-end"; got != want {
		t.Errorf("ledger = %s, want %s", got, want)
	}
	for _, e := range evs {
		if e.ResumeAttempt != nil && (e.ResumeAttempt.Host != "host-b" || e.RunID != runID) {
			t.Errorf("resume attempt %+v of run %s, want run %s by host-b", e.ResumeAttempt, e.RunID, runID)
		}
	}

	tr := b.transcript("s")
	checkNoDuplicates(t, tr)
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
		if it.RunID != runID {
			t.Errorf("item %s (%s) belongs to run %s, want A's run %s", it.ID, it.Kind, it.RunID, runID)
		}
	}
	if want := "user: response:completed user: response:completed"; strings.Join(got, " ") != want {
		t.Fatalf("transcript = %q, want %q", strings.Join(got, " "), want)
	}
	for i, want := range []string{first, "You said: " + first, second, "You said: " + second} {
		if tr.Items[i].Text != want {
			t.Errorf("item %d = %.60q…, want %.60q…", i, tr.Items[i].Text, want)
		}
	}
	if tr.Items[2].ID != msgID || tr.Items[3].ID != answer {
		t.Errorf("items %s, %s; want the message posted to B (%s) and the answer A streamed into %s",
			tr.Items[2].ID, tr.Items[3].ID, msgID, answer)
	}
}

// TestServeTakeoverAfterCrash: two serve processes on one Redis; a message
// posted to A, A SIGKILLed while it streams the reply, the next message
// posted to B while A's lease still runs. B takes the session over once the
// lease lapses: it answers A's message, in the item A minted for it, and
// then the next — each once. With auto_resume (the default) the next
// message waits for its answer (?wait=true); without it, nobody waits and
// no sweep runs: B takes over for the message it accepted all the same.
func TestServeTakeoverAfterCrash(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	rds := redistest.Start(t, redistest.Options{})
	model := slowModel(t)
	store := tenantLedger(t, rds.URL())
	first := words("a", 150) // about 1.5 s of streaming
	for _, tc := range []struct {
		name, extra string
		wait        bool
	}{
		{name: "auto-resume", wait: true},
		{name: "no-auto-resume", extra: "auto_resume: false\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "k-" + tc.name
			config := writeServeConfig(t, rds.URL(), model.URL(), "lease_ttl: 2s\n"+tc.extra)
			a := startServe(t, "A", bin, config, "--set", "host_id=host-a")
			b := startServe(t, "B", bin, config, "--set", "host_id=host-b")
			_, runID := a.post(session, first)
			onA := a.viewer(session)
			onA.read(20*time.Second, "A's reply streaming", func(sseEvent) bool { return onA.startsWith("You said: a0 a1 a2") })
			a.signal(syscall.SIGKILL)
			a.wait(10 * time.Second)

			body, _ := json.Marshal(map[string]string{"text": "second"})
			if tc.wait {
				var res struct {
					Status, Text string
				}
				b.must("POST", "/v1/sessions/"+session+"/messages?wait=true", string(body), http.StatusOK, &res)
				if res.Status != "completed" || res.Text != "You said: second" {
					t.Errorf("the answer B gave: %+v", res)
				}
			} else {
				b.must("POST", "/v1/sessions/"+session+"/messages", string(body), http.StatusAccepted, nil)
			}
			evs := hosttest.WaitLedger(t, store, session, 30*time.Second, "both messages answered", func(evs []ledger.Event) bool {
				return hosttest.Settled(evs) && len(ledger.PendingInputs(evs)) == 0
			})
			tr := b.transcript(session)
			checkNoDuplicates(t, tr)
			var got []string
			for _, it := range tr.Items {
				got = append(got, it.Kind+":"+it.Status+":"+it.Text)
			}
			want := []string{"user::" + first, "response:completed:You said: " + first, "user::second", "response:completed:You said: second"}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("transcript:\n%s\nwant:\n%s\nledger: %s", strings.Join(got, "\n"), strings.Join(want, "\n"), hosttest.Kinds(evs))
			}
			if tr.Items[1].RunID != runID {
				t.Errorf("A's message was answered by run %s, not by the run A died in, %s", tr.Items[1].RunID, runID)
			}
			if n := hosttest.CountKind(evs, ledger.KindResumeAttempt); n != 1 {
				t.Errorf("%d resume attempts: %s", n, hosttest.Kinds(evs))
			}
			for _, e := range evs {
				if e.ResumeAttempt != nil && e.ResumeAttempt.Host != "host-b" {
					t.Errorf("resumed by %s, want host-b", e.ResumeAttempt.Host)
				}
			}
		})
	}
}

// fileLedger opens tenant acme's view of the file storage in dir, as the
// server keeps it.
func fileLedger(t *testing.T, dir string) storage.Storage {
	t.Helper()
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	s, err := storage.Prefix(fs, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeSIGTERMDrains: SIGTERM a serve process while a run streams. It
// stops taking work — readyz and new messages answer 503 while it drains,
// the event stream closes — and exits 0 within its shutdown grace (and a
// bound). The run is never recorded as cancelled or failed: given the
// grace, it stops at its next step boundary (the pass in flight recorded,
// the queued message left for the next host); past the grace, it stops as
// a crash would (the pass in flight dropped). Either way a new serve
// process resumes it at boot and answers, with no item or text twice.
func TestServeSIGTERMDrains(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		queued  string // a message queued into the run before SIGTERM
		drained string // the ledger once the process exited
		passes  int    // the model passes made in all
		items   string
	}{
		{name: "step boundary", grace: time.Minute, queued: "queued meanwhile", drained: "input run-start input step", passes: 2,
			items: "user: response:completed user: response:completed"},
		{name: "grace passed", grace: 300 * time.Millisecond, drained: "input run-start", passes: 2,
			items: "user: response:completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			store := fileLedger(t, dir)
			config := writeServeConfig(t, "file:"+dir, model.URL(), fmt.Sprintf("shutdown_grace: %s\n", tc.grace))
			calls := model.RequestCount()
			a := startServe(t, "A", bin, config)
			first := words("d", 300)
			// The first pass pauses mid-stream until the draining process
			// was probed (with a grace that ends first, for good: the
			// process stops in it), whatever the machine's speed; the pass
			// of the next process is the model's echo.
			held := make(chan struct{})
			release := sync.OnceFunc(func() { close(held) })
			t.Cleanup(release)
			model.Enqueue(fakemodel.Reply{Text: "You said: " + first, Hold: held, HoldAfter: 10})
			_, runID := a.post("s", first)
			onA := a.viewer("s")
			onA.read(20*time.Second, "the reply streaming", func(sseEvent) bool { return onA.startsWith("You said: d0 d1 d2") })
			if tc.queued != "" {
				a.post("s", tc.queued)
			}
			if evs := hosttest.Load(t, store, "s"); hosttest.CountKind(evs, ledger.KindStep) != 0 {
				t.Fatalf("the pass ended while the model held it: %s", hosttest.Kinds(evs))
			}
			a.signal(syscall.SIGTERM)
			signalled := time.Now()

			if tc.queued != "" {
				// Draining: readyz and new work answer 503 while the run
				// finishes its pass; reads are served.
				for {
					code, body, err := a.do("GET", "/readyz", "")
					if err != nil {
						t.Fatalf("readyz while draining: %v (the process exited before its run stopped?)", err)
					}
					if code == http.StatusServiceUnavailable {
						break
					}
					if code != http.StatusOK || time.Since(signalled) > 10*time.Second {
						t.Fatalf("readyz after SIGTERM: %d %s", code, body)
					}
					time.Sleep(5 * time.Millisecond)
				}
				for _, session := range []string{"s", "new"} {
					code, body, err := a.do("POST", "/v1/sessions/"+session+"/messages", `{"text":"too late"}`)
					if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
						t.Errorf("a message to %s while draining: %d %v %s; want 503 unavailable", session, code, err, body)
					}
				}
				if evs := hosttest.Load(t, store, "s"); hosttest.Settled(evs) || hosttest.CountKind(evs, ledger.KindStep) != 0 {
					t.Fatalf("the pass ended while the model held it: %s", hosttest.Kinds(evs))
				}
				a.must("GET", "/v1/sessions/s/transcript", "", http.StatusOK, nil)
				release() // the pass ends within the grace: the run stops at that step boundary
			}
			onA.closes(30 * time.Second)
			if code := a.wait(tc.grace + 20*time.Second); code != 0 {
				t.Fatalf("serve exited %d after SIGTERM", code)
			}
			t.Logf("serve exited %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))

			evs := hosttest.Load(t, store, "s")
			if got := hosttest.Kinds(evs); got != tc.drained {
				t.Errorf("the ledger after the shutdown = %s, want %s", got, tc.drained)
			}
			if open := ledger.OpenRuns(evs); len(open) != 1 || open[0] != runID {
				t.Errorf("open runs %v, want %s left interrupted", open, runID)
			}

			// The next serve process resumes the run at boot.
			b := startServe(t, "B", bin, config)
			b.waitState("s", "completed", 60*time.Second)
			evs = hosttest.Load(t, store, "s")
			if got, want := hosttest.Kinds(evs), tc.drained+" resume-attempt step run-end"; got != want {
				t.Errorf("the ledger after the next process = %s, want %s", got, want)
			}
			if n := model.RequestCount() - calls; n != tc.passes {
				t.Errorf("%d model passes, want %d", n, tc.passes)
			}
			for _, e := range evs {
				if e.RunEnd != nil && (e.RunID != runID || e.RunEnd.Status != ledger.RunCompleted) {
					t.Errorf("run %s ended %s (%s)", e.RunID, e.RunEnd.Status, e.RunEnd.Reason)
				}
			}
			tr := b.transcript("s")
			checkNoDuplicates(t, tr)
			var got []string
			for _, it := range tr.Items {
				got = append(got, it.Kind+":"+it.Status)
			}
			if strings.Join(got, " ") != tc.items {
				t.Errorf("transcript = %q, want %q", strings.Join(got, " "), tc.items)
			}
			if tr.Items[1].Text != "You said: "+first {
				t.Errorf("the answer = %.60q…", tr.Items[1].Text)
			}
		})
	}
}

// TestServeQuickStart: README's quick start, as an operator runs it — a
// key made with keys create, serve --offline with the example
// configuration, a message posted and its answer followed over SSE — then
// the key revoked from another process: the running server refuses it.
func TestServeQuickStart(t *testing.T) {
	bin := needBinary(t)
	storageURL := "file:" + t.TempDir()
	code, out, errOut := runBin(t, bin, "keys", "create", "--tenant", "acme", "--storage", storageURL)
	if code != 0 || !strings.HasPrefix(out, "ak_") {
		t.Fatalf("keys create: %d %q %s", code, out, errOut)
	}
	key := strings.TrimSpace(out)
	s := startServe(t, "serve", bin, exampleConfig, "--offline", "--storage", storageURL, "--set", "plugins_dir="+t.TempDir())
	s.key = key
	s.must("GET", "/readyz", "", http.StatusOK, nil)
	s.post("s1", "hello")
	v := s.viewer("s1")
	v.read(30*time.Second, "the answer", func(sseEvent) bool { return v.startsWith("You said: hello") && v.completed() })
	s.waitState("s1", "completed", 10*time.Second)

	var keys []struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
	}
	code, out, errOut = runBin(t, bin, "keys", "list", "--json", "--storage", storageURL)
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys) != 1 || keys[0].Tenant != "acme" || !strings.Contains(key, keys[0].ID) {
		t.Fatalf("keys list: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := runBin(t, bin, "keys", "revoke", keys[0].ID, "--storage", storageURL); code != 0 {
		t.Fatalf("keys revoke: %d %s %s", code, out, errOut)
	}
	if code, body, err := s.do("GET", "/v1/sessions/s1", ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a revoked key: %d %v %s, want 401", code, err, body)
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("serve exited %d after SIGTERM", code)
	}
}

// TestServePluginCacheDir: serve keeps its plugins' compilation cache on
// disk by default ($AGENTIC_WASM_CACHE, else the user cache directory), so
// that a restart compiles nothing it compiled before; a directory it cannot
// write, or no directory to name, leaves it with a cache of its own and a
// warning naming plugin_cache_dir, never a failed start.
func TestServePluginCacheDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" for none, with a warning
	}{
		{"AGENTIC_WASM_CACHE", map[string]string{"AGENTIC_WASM_CACHE": filepath.Join(dir, "cache"), "HOME": dir}, filepath.Join(dir, "cache")},
		{"XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": filepath.Join(dir, "xdg"), "HOME": dir}, filepath.Join(dir, "xdg", "agentic-host", "wasm")},
		{"HOME", map[string]string{"HOME": filepath.Join(dir, "home")}, filepath.Join(dir, "home", ".cache", "agentic-host", "wasm")},
		{"unwritable", map[string]string{"AGENTIC_WASM_CACHE": filepath.Join(file, "cache")}, ""},
		{"nothing to name it", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, nil))
			env := cli.Env{Getenv: func(k string) string { return tc.env[k] }}
			got := cli.ServePluginCacheDir(env, log)
			if got != tc.want {
				t.Fatalf("plugin_cache_dir %q, want %q (log: %s)", got, tc.want, logs.String())
			}
			if tc.want == "" {
				if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "set plugin_cache_dir") {
					t.Errorf("no warning naming plugin_cache_dir: %s", logs.String())
				}
				return
			}
			if st, err := os.Stat(got); err != nil || !st.IsDir() {
				t.Errorf("the directory was not made: %v", err)
			}
			if logs.Len() != 0 {
				t.Errorf("logged: %s", logs.String())
			}
		})
	}
}

// TestServeSecondSignal: a second SIGTERM while serve drains ends the
// process at once, as a crash (killed by the signal), rather than after
// shutdown_grace (here a minute); its run stays interrupted, resumable.
func TestServeSecondSignal(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model := slowModel(t)
	dir := t.TempDir()
	a := startServe(t, "A", bin, writeServeConfig(t, "file:"+dir, model.URL(), "shutdown_grace: 1m\n"))
	held := make(chan struct{}) // the pass never ends while A lives
	t.Cleanup(func() { close(held) })
	first := words("d", 300)
	model.Enqueue(fakemodel.Reply{Text: "You said: " + first, Hold: held, HoldAfter: 10})
	a.post("s", first)
	onA := a.viewer("s")
	onA.read(20*time.Second, "the reply streaming", func(sseEvent) bool { return onA.startsWith("You said: d0 d1 d2") })
	a.signal(syscall.SIGTERM)
	for {
		code, _, err := a.do("GET", "/readyz", "")
		if err != nil {
			t.Fatalf("readyz while draining: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			break // draining, its run held in its step for the minute's grace
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(30 * time.Second); code != -1 {
		t.Errorf("exit code %d after a second SIGTERM, want -1 (killed by the signal)", code)
	}
	evs := hosttest.Load(t, fileLedger(t, dir), "s")
	if got := hosttest.Kinds(evs); got != "input run-start" {
		t.Errorf("the ledger after the second signal: %q, want the run interrupted (no end)", got)
	}
}
