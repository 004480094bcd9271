package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentichost/agentic/server"
)

// BenchmarkRefusal is what serve's handlers spend on a request past its
// tenant's rate limit (429): the key's check, the token bucket, the error's
// JSON and the request's metric; net/http's reading and writing of the
// connection come on top (make load prints the whole refusal's CPU).
func BenchmarkRefusal(b *testing.B) {
	ts := startServer(b, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.RateLimit = server.RateLimitConfig{RequestsPerSecond: 1e-6, Burst: 1}
	})})
	send := func() int {
		req := httptest.NewRequest("POST", "/v1/sessions/x/messages", strings.NewReader(`{"text":"hello"}`))
		req.Header.Set("Authorization", "Bearer "+ts.acme)
		w := httptest.NewRecorder()
		ts.srv.ServeHTTP(w, req)
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
