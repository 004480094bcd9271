package provider_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/fixtures"
	"github.com/agentichost/agentic/ledger"
)

func hello() model.Request {
	return model.Request{Model: "fake/echo", Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("hi")}}}}
}

// TestClassifyFakeModelFaults classifies the error of a real streamed call
// for every fault the fake model injects.
func TestClassifyFakeModelFaults(t *testing.T) {
	for _, tc := range []struct {
		fault      fakemodel.Fault
		want       model.ClassKind
		retryAfter time.Duration
	}{
		{fakemodel.Fault{Kind: fakemodel.FaultRateLimit}, model.Transient, 2 * time.Second},
		{fakemodel.Fault{Kind: fakemodel.FaultServerError}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultBadGateway}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoProvider}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 408}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 409}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 425}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultDrop}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultSever}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStall}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultErrorChunk}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultErrorChunk, Status: 429}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoFinish}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultFinishError}, model.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoCredits}, model.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultUnauthorized}, model.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 403}, model.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 400}, model.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultContextOverflow}, model.ContextOverflow, 0},
	} {
		name := tc.fault.Kind.String()
		if tc.fault.Status != 0 {
			name = fmt.Sprintf("%s-%d", name, tc.fault.Status)
		}
		t.Run(name, func(t *testing.T) {
			srv, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{{Text: "a b c d e f", Fault: &tc.fault}}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			c, err := provider.New(provider.Config{BaseURL: srv.URL(), IdleTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			_, serr := c.Stream(context.Background(), hello(), nil)
			if serr == nil {
				t.Fatal("no error")
			}
			got := model.Classify(serr)
			if got.Kind != tc.want || got.RetryAfter != tc.retryAfter {
				t.Errorf("Classify(%v) = %+v, want %s with Retry-After %s", serr, got, tc.want, tc.retryAfter)
			}
			if got.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

// TestClassifyOverflowFixtures serves each recorded overflow body (and the
// 402 that merely looks like one) and classifies the client's error.
func TestClassifyOverflowFixtures(t *testing.T) {
	for _, tc := range []struct {
		file   string
		status int
		want   model.ClassKind
	}{
		{"error_context_overflow_openrouter.json", 400, model.ContextOverflow},
		{"error_context_overflow_openrouter_plugin.json", 400, model.ContextOverflow},
		{"error_context_overflow_openai.json", 400, model.ContextOverflow},
		{"error_context_overflow_openai_window.json", 400, model.ContextOverflow},
		{"error_context_overflow_anthropic.json", 400, model.ContextOverflow},
		{"error_context_overflow_anthropic_via_openrouter.json", 400, model.ContextOverflow},
		{"error_context_overflow_gemini.json", 400, model.ContextOverflow},
		{"error_402_max_tokens.json", 402, model.Fatal},
		{"error_403_moderation.json", 403, model.Fatal},
		{"error_429_free_daily.json", 429, model.Transient},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := fixtures.Bytes(tc.file)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				w.Write(body)
			}))
			defer srv.Close()
			c, err := provider.New(provider.Config{BaseURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			_, serr := c.Stream(context.Background(), hello(), nil)
			if got := model.Classify(serr); got.Kind != tc.want {
				t.Errorf("Classify(%v) = %+v, want %s", serr, got, tc.want)
			}
		})
	}
}

// TestHeaderTimeoutIsTransient: a server that accepts the request and never
// answers fails within HeaderTimeout, as a transient error.
func TestHeaderTimeoutIsTransient(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	c, err := provider.New(provider.Config{BaseURL: srv.URL, HeaderTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, serr := c.Stream(context.Background(), hello(), nil)
	if serr == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("err %v after %s", serr, time.Since(start))
	}
	if got := model.Classify(serr); got.Kind != model.Transient {
		t.Errorf("Classify(%v) = %+v, want transient", serr, got)
	}
}
