package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
)

// flushCounter is a ResponseWriter that counts its flushes.
type flushCounter struct {
	header  http.Header
	mu      sync.Mutex
	body    bytes.Buffer
	flushes int
	onFlush func(body []byte) // called at each flush with the body so far
}

func (f *flushCounter) Header() http.Header { return f.header }
func (f *flushCounter) WriteHeader(int)     {}
func (f *flushCounter) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.body.Write(b)
}
func (f *flushCounter) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	if f.onFlush != nil {
		f.onFlush(f.body.Bytes())
	}
}

// TestReadyUpdatesLeaveInOneWrite: a viewer that comes back to a run whose
// progress is all there (Last-Event-ID at its start) gets it in one flush,
// not a write for each event: the relay writes what is ready, then flushes
// once before it waits. Each event still goes out whole, in order, with
// its id.
func TestReadyUpdatesLeaveInOneWrite(t *testing.T) {
	ts := newTestServer(t)
	const n = 40
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%02d", i)
	}
	// The words stream at once, then the run waits, in flight.
	ts.model.Enqueue(hosttest.Reply{Text: strings.Join(words, " "), Stall: time.Minute})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages", `{"text":"talk"}`); code != 202 {
		t.Fatalf("%d %s", code, body)
	}
	// A first viewer reads until the last word, to learn the run's id.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/sessions/s1/events", nil)
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	runID := ""
	for r := newSSEReader(res.Body); ; {
		e, ok := r.next()
		if !ok {
			t.Fatal("the stream ended before the last word")
		}
		// A snapshot holds the text so far, and its id names the run.
		runID, _, _ = strings.Cut(e.ID, ":")
		if strings.Contains(e.Data, words[n-1]) {
			break
		}
	}
	res.Body.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", "/v1/sessions/s1/events", nil)
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	req.Header.Set("Last-Event-ID", runID+":0")
	sawAll := make(chan struct{})
	rw := &flushCounter{header: http.Header{}}
	rw.onFlush = func(body []byte) {
		if sawAll != nil && bytes.Contains(body, []byte(words[n-1])) {
			close(sawAll)
			sawAll = nil
		}
	}
	flushed := sawAll
	served := make(chan struct{})
	go func() {
		defer close(served)
		ts.srv.ServeHTTP(rw, req)
	}()
	select {
	case <-flushed:
	case <-time.After(15 * time.Second):
		t.Fatal("the last word was not flushed")
	}
	cancel()
	<-served
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/cancel", ""); code/100 != 2 {
		t.Errorf("cancel: %d %s", code, body)
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	// One flush for the headers, one for the events that were ready.
	if rw.flushes > 2 {
		t.Errorf("%d flushes for %d ready events, want 2 (the headers, then the events)", rw.flushes, n)
	}
	r := newSSEReader(bytes.NewReader(rw.body.Bytes()))
	got, seq := 0, 0
	for {
		e, ok := r.next()
		if !ok {
			break
		}
		if e.Name != "progress" {
			t.Fatalf("event %q after Last-Event-ID at the run's start", e.Name)
		}
		seq++
		if want := fmt.Sprintf("%s:%d", runID, seq); e.ID != want {
			t.Fatalf("event id %q, want %q", e.ID, want)
		}
		if got < n && strings.Contains(e.Data, words[got]) {
			got++
		}
	}
	if got != n {
		t.Errorf("%d of the %d words, in order, in %q", got, n, rw.body.String())
	}
}

// TestNewChatHeadersLeaveWithItsStart: a new chat through the UI route
// writes its first chunks at once, so its headers leave with them in one
// write rather than alone before them.
func TestNewChatHeadersLeaveWithItsStart(t *testing.T) {
	ts := newTestServer(t)
	req, _ := http.NewRequest("POST", "/v1/ui/chat", strings.NewReader(uiBody("u1", "hello")))
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	req.Header.Set("Content-Type", "application/json")
	rw := &flushCounter{header: http.Header{}}
	var first []byte
	rw.onFlush = func(body []byte) {
		if first == nil {
			first = append([]byte{}, body...)
		}
	}
	ts.srv.ServeHTTP(rw, req)
	if !bytes.Contains(first, []byte(`"type":"start"`)) {
		t.Errorf("the first flush carried %q, want the stream's start", first)
	}
	if !bytes.Contains(rw.body.Bytes(), []byte("data: [DONE]")) {
		t.Errorf("the stream did not end: %q", rw.body.String())
	}
}
