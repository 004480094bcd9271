package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// BenchmarkRefusal is what serve's handlers spend on a request past its
// tenant's rate limit (429): the key's check, the token bucket, the error's
// JSON and the request's metric; net/http's reading and writing of the
// connection come on top (make load prints the whole refusal's CPU).
func BenchmarkRefusal(b *testing.B) {
	cfg := server.Config{PluginsDir: b.TempDir(), Tenants: map[string]server.TenantConfig{
		"acme": {
			Keys:      []server.KeyConfig{{Hash: server.HashKey("ak_test_acme")}},
			Models:    []string{hosttest.DefaultModel},
			RateLimit: server.RateLimitConfig{RequestsPerSecond: 1e-6, Burst: 1},
		},
	}}
	srv, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	send := func() int {
		req := httptest.NewRequest("POST", "/v1/sessions/x/messages", strings.NewReader(`{"text":"hello"}`))
		req.Header.Set("Authorization", "Bearer ak_test_acme")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		return w.Code
	}
	send() // the bucket's one token
	b.ReportAllocs()
	for b.Loop() {
		if code := send(); code != http.StatusTooManyRequests {
			b.Fatalf("status %d, want 429", code)
		}
	}
}
