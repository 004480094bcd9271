package provider

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
)

// FuzzStream feeds arbitrary bodies, served as an event stream, through
// Stream. It must never panic or hang, and whatever it returns must be
// consistent with the deltas it reported.
func FuzzStream(f *testing.F) {
	for _, name := range fixtures.Names() {
		if strings.HasSuffix(name, ".sse") {
			f.Add(fixtures.Bytes(name))
		}
	}
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("data: {\"error\":null}\n\n"))
	f.Add([]byte("data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":200,\"id\":\"x\",\"function\":{\"name\":\"n\",\"arguments\":\"{\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"))
	f.Add([]byte("data: {\"id\":\"a\",\"choices\":[{\"index\":999,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"r\",\"reasoning_details\":[{\"index\":0,\"type\":\"t\",\"text\":\"a\"},{\"index\":0,\"type\":\"t\",\"text\":1}]},\"finish_reason\":\"stop\"}],\"usage\":{\"cost\":\"x\",\"is_byok\":1}}\n\n"))
	f.Add([]byte("event: x\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}\ndata: }]}\n\n: c\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"no\"},\"finish_reason\":\"error\"}]}\n\n"))

	var bodies sync.Map // path id → body
	var next atomic.Int64
	srv := serveFunc(f, func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/chat/completions")
		b, _ := bodies.Load(id)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(b.([]byte))
	})

	// One transport for all inputs: a client per input would leave its idle
	// connections open and exhaust the ports.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	f.Cleanup(hc.CloseIdleConnections)

	f.Fuzz(func(t *testing.T, body []byte) {
		id := strconv.FormatInt(next.Add(1), 10)
		bodies.Store(id, body)
		defer bodies.Delete(id)
		c, err := New(Config{BaseURL: srv.URL + "/" + id, APIKey: "k", IdleTimeout: 2 * time.Second, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rec recorder
		res, err := c.Stream(ctx, userRequest("q"), rec.on)
		if ctx.Err() != nil || errors.Is(err, model.ErrStalled) {
			t.Fatalf("Stream hung: %v", err)
		}
		if got := rec.text(model.DeltaText); got != res.Text {
			t.Errorf("text deltas join to %q, model.Result.Text = %q", got, res.Text)
		}
		if got := rec.text(model.DeltaReasoning); got != res.Reasoning {
			t.Errorf("reasoning deltas join to %q, model.Result.Reasoning = %q", got, res.Reasoning)
		}
		for i, tc := range res.ToolCalls {
			if got := rec.args(i); got != tc.Arguments {
				t.Errorf("call %d: fragments join to %q, Arguments = %q", i, got, tc.Arguments)
			}
			if tc.ID == "" {
				t.Errorf("call %d has no id", i)
			}
		}
		if err == nil && (res.FinishReason == "" || res.FinishReason == "error") {
			t.Errorf("no error with finish reason %q", res.FinishReason)
		}
		var pe *model.Error
		if err != nil && !errors.As(err, &pe) && !errors.Is(err, model.ErrIncompleteStream) && !errors.Is(err, model.ErrMalformedStream) &&
			!strings.HasPrefix(err.Error(), "provider: ") {
			t.Errorf("unexpected error %T: %v", err, err)
		}
	})
}
