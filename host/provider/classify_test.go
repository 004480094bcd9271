package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/fixtures"
)

func hello() provider.Request {
	return provider.Request{Model: "fake/echo", Messages: []ledger.Message{{Role: ledger.RoleUser, Parts: []ledger.Part{ledger.TextPart("hi")}}}}
}

// TestClassifyFakeModelFaults classifies the error of a real streamed call
// for every fault the fake model injects.
func TestClassifyFakeModelFaults(t *testing.T) {
	for _, tc := range []struct {
		fault      fakemodel.Fault
		want       provider.ClassKind
		retryAfter time.Duration
	}{
		{fakemodel.Fault{Kind: fakemodel.FaultRateLimit}, provider.Transient, 2 * time.Second},
		{fakemodel.Fault{Kind: fakemodel.FaultServerError}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultBadGateway}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoProvider}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 408}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 409}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 425}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultDrop}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultSever}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStall}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultErrorChunk}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultErrorChunk, Status: 429}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoFinish}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultFinishError}, provider.Transient, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultNoCredits}, provider.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultUnauthorized}, provider.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 403}, provider.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultStatus, Status: 400}, provider.Fatal, 0},
		{fakemodel.Fault{Kind: fakemodel.FaultContextOverflow}, provider.ContextOverflow, 0},
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
			got := provider.Classify(serr)
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
		want   provider.ClassKind
	}{
		{"error_context_overflow_openrouter.json", 400, provider.ContextOverflow},
		{"error_context_overflow_openrouter_plugin.json", 400, provider.ContextOverflow},
		{"error_context_overflow_openai.json", 400, provider.ContextOverflow},
		{"error_context_overflow_openai_window.json", 400, provider.ContextOverflow},
		{"error_context_overflow_anthropic.json", 400, provider.ContextOverflow},
		{"error_context_overflow_anthropic_via_openrouter.json", 400, provider.ContextOverflow},
		{"error_context_overflow_gemini.json", 400, provider.ContextOverflow},
		{"error_402_max_tokens.json", 402, provider.Fatal},
		{"error_403_moderation.json", 403, provider.Fatal},
		{"error_429_free_daily.json", 429, provider.Transient},
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
			if got := provider.Classify(serr); got.Kind != tc.want {
				t.Errorf("Classify(%v) = %+v, want %s", serr, got, tc.want)
			}
		})
	}
}

func TestClassifyPlainErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want provider.ClassKind
	}{
		{context.Canceled, provider.Fatal},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), provider.Transient},
		{provider.ErrStalled, provider.Transient},
		{provider.ErrIncompleteStream, provider.Transient},
		{provider.ErrInvalidRequest, provider.Fatal},
		{errors.New("something odd"), provider.Fatal},
	} {
		if got := provider.Classify(tc.err); got.Kind != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got.Kind, tc.want)
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := provider.RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxRetryAfter: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 50 {
			d := p.Delay(attempt, provider.Class{Kind: provider.Transient})
			if d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
	if d := p.Delay(1, provider.Class{RetryAfter: 3 * time.Second}); d != 3*time.Second {
		t.Errorf("Retry-After 3s gave %s", d)
	}
	if d := p.Delay(1, provider.Class{RetryAfter: time.Hour}); d != 5*time.Second {
		t.Errorf("Retry-After 1h gave %s, want the 5s cap", d)
	}
}

func TestWithRetries(t *testing.T) {
	ctx := context.Background()
	p := provider.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}
	transient := &provider.Error{StatusCode: 503}
	t.Run("succeeds after transient failures", func(t *testing.T) {
		var retries []int
		v, err := provider.WithRetries(ctx, p, func(_ context.Context, attempt int) (int, error) {
			if attempt < 3 {
				return 0, transient
			}
			return attempt, nil
		}, func(ri provider.RetryInfo) error { retries = append(retries, ri.Attempt); return nil })
		if err != nil || v != 3 || fmt.Sprint(retries) != "[1 2]" {
			t.Errorf("v=%d err=%v retries=%v", v, err, retries)
		}
	})
	t.Run("fatal stops at once", func(t *testing.T) {
		calls := 0
		_, err := provider.WithRetries(ctx, p, func(context.Context, int) (int, error) {
			calls++
			return 0, &provider.Error{StatusCode: 402}
		}, nil)
		if calls != 1 || err == nil {
			t.Errorf("calls=%d err=%v", calls, err)
		}
	})
	t.Run("attempts run out", func(t *testing.T) {
		calls := 0
		_, err := provider.WithRetries(ctx, p, func(context.Context, int) (int, error) {
			calls++
			return 0, transient
		}, nil)
		if calls != 4 || !errors.Is(err, transient) {
			t.Errorf("calls=%d err=%v", calls, err)
		}
	})
	t.Run("onRetry error stops", func(t *testing.T) {
		stop := errors.New("ledger down")
		_, err := provider.WithRetries(ctx, p, func(context.Context, int) (int, error) { return 0, transient },
			func(provider.RetryInfo) error { return stop })
		if !errors.Is(err, stop) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("cancel during the wait", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		slow := provider.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: time.Hour}
		start := time.Now()
		_, err := provider.WithRetries(cctx, slow, func(context.Context, int) (int, error) { return 0, transient },
			func(provider.RetryInfo) error { cancel(); return nil })
		if !errors.Is(err, transient) || time.Since(start) > time.Minute {
			t.Errorf("err = %v after %s", err, time.Since(start))
		}
	})
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
	if got := provider.Classify(serr); got.Kind != provider.Transient {
		t.Errorf("Classify(%v) = %+v, want transient", serr, got)
	}
}

// retryableErr is an error that says whether it is worth retrying.
type retryableErr struct {
	retry bool
	cause error
}

func (e *retryableErr) Error() string   { return fmt.Sprintf("wrapped (retry %v): %v", e.retry, e.cause) }
func (e *retryableErr) Unwrap() error   { return e.cause }
func (e *retryableErr) Retryable() bool { return e.retry }

// TestClassifyHonoursRetryable: an error's own Retryable() wins over the
// rules, wherever it sits in the chain, and WithRetries follows it.
func TestClassifyHonoursRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want provider.ClassKind
	}{
		{"retryable over a fatal 401", &retryableErr{true, &provider.Error{StatusCode: 401}}, provider.Transient},
		{"not retryable over a transient 503", &retryableErr{false, &provider.Error{StatusCode: 503}}, provider.Fatal},
		{"not retryable over a stall", &retryableErr{false, provider.ErrStalled}, provider.Fatal},
		{"wrapped in turn", fmt.Errorf("metering: %w", &retryableErr{true, errors.New("quota service busy")}), provider.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := provider.Classify(tc.err); got.Kind != tc.want {
				t.Errorf("Classify = %+v, want %s", got, tc.want)
			}
			calls := 0
			_, err := provider.WithRetries(context.Background(), provider.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Microsecond},
				func(context.Context, int) (int, error) { calls++; return 0, tc.err }, nil)
			want := 1
			if tc.want == provider.Transient {
				want = 3
			}
			if calls != want || !errors.Is(err, tc.err) {
				t.Errorf("WithRetries made %d calls (%v), want %d", calls, err, want)
			}
		})
	}
}
