package provider

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fixtures"
)

func TestContextWindow(t *testing.T) {
	fs := serve(t, reply{header: http.Header{"Content-Type": {"application/json"}}, body: fixtures.Bytes("models_list.json")})
	c := newClient(t, fs, Config{})
	tests := []struct {
		model string
		want  int
		err   error
	}{
		{"anthropic/claude-sonnet-4.6", 1000000, nil},
		{"anthropic/claude-4.6-sonnet-20260217", 1000000, nil}, // canonical slug
		{"mistralai/mistral-7b-instruct", 8192, nil},           // top_provider's window, smaller than context_length
		{"openrouter/auto", 2000000, nil},                      // top_provider null: context_length
		{"no/such-model", 0, ErrUnknownModel},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			got, err := c.ContextWindow(context.Background(), tt.model)
			if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Errorf("ContextWindow = %d, %v; want %d, %v", got, err, tt.want, tt.err)
			}
		})
	}
	if fs.count() != 1 {
		t.Errorf("model list fetched %d times, want once", fs.count())
	}
	if p := fs.lastHeader().Get("Authorization"); p != "Bearer test-key" {
		t.Errorf("Authorization = %q", p)
	}
}

func TestContextWindowRefetch(t *testing.T) {
	fs := serve(t, reply{header: http.Header{"Content-Type": {"application/json"}}, body: fixtures.Bytes("models_list.json")})
	c := newClient(t, fs, Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.models.now = func() time.Time { return now }
	ctx := context.Background()

	if _, err := c.ContextWindow(ctx, "no/such-model"); !errors.Is(err, ErrUnknownModel) {
		t.Fatal(err)
	}
	now = now.Add(ModelsRefetchAfter - time.Second)
	_, _ = c.ContextWindow(ctx, "no/such-model")
	if w, err := c.ContextWindow(ctx, "openrouter/auto"); w != 2000000 || err != nil {
		t.Fatal(w, err)
	}
	if fs.count() != 1 {
		t.Fatalf("fetched %d times before the list aged, want 1", fs.count())
	}
	now = now.Add(2 * time.Second)
	if w, _ := c.ContextWindow(ctx, "openrouter/auto"); w != 2000000 || fs.count() != 1 {
		t.Fatalf("a known model caused a refetch (%d fetches)", fs.count())
	}
	_, _ = c.ContextWindow(ctx, "no/such-model")
	if fs.count() != 2 {
		t.Fatalf("fetched %d times after the list aged, want 2", fs.count())
	}
}

func TestContextWindowErrors(t *testing.T) {
	tests := []struct {
		name   string
		r      reply
		status int
	}{
		{"401", reply{status: 401, body: fixtures.Bytes("error_401.json")}, 401},
		{"not JSON", reply{header: http.Header{"Content-Type": {"application/json"}}, body: []byte("{")}, 0},
		{"no window", reply{header: http.Header{"Content-Type": {"application/json"}},
			body: []byte(`{"data":[{"id":"a/b","context_length":null,"top_provider":{"context_length":null}},{"id":7},"junk"]}`)}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := serve(t, tt.r)
			c := newClient(t, fs, Config{})
			_, err := c.ContextWindow(context.Background(), "a/b")
			var pe *model.Error
			switch {
			case tt.status > 0:
				if !errors.As(err, &pe) || pe.StatusCode != tt.status {
					t.Errorf("err = %v, want *model.Error %d", err, tt.status)
				}
			case tt.status < 0:
				if !errors.Is(err, ErrUnknownModel) {
					t.Errorf("err = %v, want ErrUnknownModel", err)
				}
			default:
				if err == nil || errors.Is(err, ErrUnknownModel) {
					t.Errorf("err = %v", err)
				}
			}
			// A failed fetch is not memoized.
			_, _ = c.ContextWindow(context.Background(), "a/b")
			if want := map[bool]int{true: 1, false: 2}[tt.status < 0]; fs.count() != want {
				t.Errorf("fetches = %d, want %d", fs.count(), want)
			}
		})
	}
}

func TestContextWindowConcurrent(t *testing.T) {
	release := make(chan struct{})
	fs := serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(fixtures.Bytes("models_list.json"))
	})
	c := newClient(t, fs, Config{})
	var wg sync.WaitGroup
	models := []string{"anthropic/claude-sonnet-4.6", "mistralai/mistral-7b-instruct", "openrouter/auto"}
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w, err := c.ContextWindow(context.Background(), models[i%len(models)]); w == 0 || err != nil {
				t.Errorf("ContextWindow = %d, %v", w, err)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if fs.count() != 1 {
		t.Errorf("fetched %d times, want once", fs.count())
	}

	// A caller waiting for the lock honours its context.
	c.models.lock <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.ContextWindow(ctx, "openrouter/auto"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
	<-c.models.lock
}
