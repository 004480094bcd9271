package provider

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
)

func TestNewDefaults(t *testing.T) {
	t.Setenv(EnvBaseURL, "")
	t.Setenv(EnvAPIKey, "")
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != DefaultBaseURL || !c.usage || c.openAIHost || c.idleTimeout != DefaultIdleTimeout {
		t.Errorf("zero Config: base %q usage %v openAI %v idle %v", c.BaseURL(), c.usage, c.openAIHost, c.idleTimeout)
	}

	t.Setenv(EnvBaseURL, "https://api.openai.com/v1/")
	c, err = New(Config{IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != "https://api.openai.com/v1" || c.usage || !c.openAIHost || c.idleTimeout != 0 {
		t.Errorf("env base: base %q usage %v openAI %v idle %v", c.BaseURL(), c.usage, c.openAIHost, c.idleTimeout)
	}

	c, err = New(Config{BaseURL: "http://127.0.0.1:8089/v1", UsageAccounting: UsageOff, IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != "http://127.0.0.1:8089/v1" || c.usage || c.idleTimeout != time.Second {
		t.Errorf("explicit: base %q usage %v idle %v", c.BaseURL(), c.usage, c.idleTimeout)
	}
}

func TestNewInvalid(t *testing.T) {
	_, err := New(Config{
		BaseURL:         "ftp://example.com",
		APIKey:          "a\nb",
		UsageAccounting: 7,
		Headers:         map[string]string{"Bad Header": "x", "X-Ok": "line\r\nbreak"},
		IdleTimeout:     -5,
	})
	if err == nil {
		t.Fatal("New accepted an invalid Config")
	}
	for _, want := range []string{"Config.BaseURL", "Config.APIKey", "Config.UsageAccounting", `invalid header name "Bad Header"`, `Config.Headers["X-Ok"]`, "Config.IdleTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, base := range []string{"://nope", "http://", "https://example.com/v1?x=1", "example.com/v1"} {
		if _, err := New(Config{BaseURL: base}); err == nil {
			t.Errorf("New accepted BaseURL %q", base)
		}
	}
}

func TestStreamCancel(t *testing.T) {
	first := events(fixtures.Bytes("stream_text.sse"))[:4] // comments, role chunk, "Hello"
	release := make(chan struct{})
	fs := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(sse(first...))
		w.(http.Flusher).Flush()
		select { // keep the stream open
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c := newClient(t, fs, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type out struct {
		res model.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := c.Stream(ctx, userRequest("q"), func(d model.Delta) {
			if d.Text == "Hello" {
				cancel()
			}
		})
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		if !errors.Is(o.err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", o.err)
		}
		if o.res.Text != "Hello" || o.res.GenerationID == "" {
			t.Errorf("partial result = %+v, want Text %q", o.res, "Hello")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancellation")
	}
}

func TestStreamDeadline(t *testing.T) {
	fs := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(": OPENROUTER PROCESSING\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := newClient(t, fs, Config{}).Stream(ctx, userRequest("q"), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestStreamStalled(t *testing.T) {
	first := events(fixtures.Bytes("stream_text.sse"))[:4]
	fs := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(sse(first...))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := newClient(t, fs, Config{IdleTimeout: 150 * time.Millisecond})
	start := time.Now()
	res, err := c.Stream(context.Background(), userRequest("q"), nil)
	if !errors.Is(err, model.ErrStalled) {
		t.Fatalf("err = %v, want model.ErrStalled", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("a stall must not look like the caller's cancellation: %v", err)
	}
	if res.Text != "Hello" {
		t.Errorf("partial Text = %q", res.Text)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("stall detected after %v", d)
	}
}

func TestStreamKeepAliveIsNotStall(t *testing.T) {
	evs := events(fixtures.Bytes("stream_text.sse"))
	fs := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i, e := range evs {
			if i == 3 { // silent for longer than the bound, but with comments
				for range 4 {
					_, _ = w.Write([]byte(": OPENROUTER PROCESSING\n\n"))
					fl.Flush()
					time.Sleep(60 * time.Millisecond)
				}
			}
			_, _ = w.Write(sse(e))
			fl.Flush()
		}
	})
	res, err := newClient(t, fs, Config{IdleTimeout: 150 * time.Millisecond}).Stream(context.Background(), userRequest("q"), nil)
	if err != nil || res.Text != "Hello, world!" {
		t.Fatalf("res, err = %+v, %v", res, err)
	}
}

func TestStreamConcurrent(t *testing.T) {
	fs := serve(t, reply{body: fixtures.Bytes("stream_tool_calls.sse")})
	c := newClient(t, fs, Config{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Stream(context.Background(), userRequest("q"), nil)
			if err != nil || len(res.ToolCalls) != 2 {
				t.Errorf("res, err = %+v, %v", res, err)
			}
		}()
	}
	wg.Wait()
}

func TestConnectionRefused(t *testing.T) {
	fs := serve(t, reply{})
	url := fs.URL
	fs.Close()
	c, err := New(Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stream(context.Background(), userRequest("q"), nil)
	var pe *model.Error
	if err == nil || errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "provider: ") {
		t.Fatalf("err = %v", err)
	}
}
