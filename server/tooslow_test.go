package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
)

// stalledWriter is an event stream's client that stops reading: once
// stalled, every write waits until release is closed.
type stalledWriter struct {
	header  http.Header
	mu      sync.Mutex
	body    bytes.Buffer
	stalled bool
	release chan struct{}
}

func (w *stalledWriter) Header() http.Header { return w.header }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	stalled := w.stalled
	w.mu.Unlock()
	if stalled {
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

func (w *stalledWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// TestEventStreamTooSlow: an event stream never holds a run up. A viewer
// that stops reading while a run streams 3,000 words falls more than the
// 1,024 events its buffer holds behind; the run completes meanwhile, and
// once the viewer reads again it is told so — an error event too_slow —
// and the stream ends (it reconnects with Last-Event-ID).
func TestEventStreamTooSlow(t *testing.T) {
	ts := startServer(t, serverSetup{})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("the first message: %d %s", code, body)
	}
	w := &stalledWriter{header: http.Header{}, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "GET", "/v1/sessions/s/events", nil)
	req.Header.Set("Authorization", "Bearer "+ts.acme)
	served := make(chan struct{})
	go func() {
		defer close(served)
		ts.srv.ServeHTTP(w, req)
	}()
	waitFor(t, "the stream's first snapshot", func() bool { return strings.Contains(w.String(), "event: snapshot") })
	w.mu.Lock()
	w.stalled = true
	w.mu.Unlock()

	ts.model.Enqueue(hosttest.Reply{Text: strings.TrimSpace(strings.Repeat("word ", 3000))})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"a long answer, please"}`); code != 200 || !strings.Contains(body, `"status":"completed"`) {
		t.Fatalf("the run a stalled viewer watched: %d %.200s", code, body)
	}
	close(w.release)
	select {
	case <-served:
	case <-time.After(2 * time.Minute): // a guard against a hang
		t.Fatal("the stream did not end once its viewer read again")
	}
	if out := w.String(); !strings.Contains(out, "event: error") || !strings.Contains(out, `"code":"too_slow"`) {
		t.Errorf("the stalled viewer's stream ends %q, want an error event too_slow", out[max(0, len(out)-300):])
	}
}
