package model_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
	"net"
	"net/url"
	"syscall"
)

func TestClassifyPlainErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want model.ClassKind
	}{
		{context.Canceled, model.Fatal},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), model.Transient},
		{model.ErrStalled, model.Transient},
		{model.ErrIncompleteStream, model.Transient},
		{model.ErrInvalidRequest, model.Fatal},
		{errors.New("something odd"), model.Fatal},
		{&url.Error{Op: "Post", URL: "https://no-such-host.invalid/v1", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Name: "no-such-host.invalid", Err: "no such host", IsNotFound: true}}}, model.Fatal},
		{&net.DNSError{Name: "openrouter.ai", Err: "i/o timeout", IsTimeout: true}, model.Transient},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, model.Transient},
	} {
		if got := model.Classify(tc.err); got.Kind != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got.Kind, tc.want)
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := model.RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxRetryAfter: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 50 {
			d := p.Delay(attempt, model.Class{Kind: model.Transient})
			if d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
	if d := p.Delay(1, model.Class{RetryAfter: 3 * time.Second}); d != 3*time.Second {
		t.Errorf("Retry-After 3s gave %s", d)
	}
	if d := p.Delay(1, model.Class{RetryAfter: time.Hour}); d != 5*time.Second {
		t.Errorf("Retry-After 1h gave %s, want the 5s cap", d)
	}
}

func TestWithRetries(t *testing.T) {
	ctx := context.Background()
	p := model.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}
	transient := &model.Error{StatusCode: 503}
	t.Run("succeeds after transient failures", func(t *testing.T) {
		var retries []int
		v, err := model.WithRetries(ctx, p, func(_ context.Context, attempt int) (int, error) {
			if attempt < 3 {
				return 0, transient
			}
			return attempt, nil
		}, func(ri model.RetryInfo) error { retries = append(retries, ri.Attempt); return nil })
		if err != nil || v != 3 || fmt.Sprint(retries) != "[1 2]" {
			t.Errorf("v=%d err=%v retries=%v", v, err, retries)
		}
	})
	t.Run("fatal stops at once", func(t *testing.T) {
		calls := 0
		_, err := model.WithRetries(ctx, p, func(context.Context, int) (int, error) {
			calls++
			return 0, &model.Error{StatusCode: 402}
		}, nil)
		if calls != 1 || err == nil {
			t.Errorf("calls=%d err=%v", calls, err)
		}
	})
	t.Run("attempts run out", func(t *testing.T) {
		calls := 0
		_, err := model.WithRetries(ctx, p, func(context.Context, int) (int, error) {
			calls++
			return 0, transient
		}, nil)
		if calls != 4 || !errors.Is(err, transient) {
			t.Errorf("calls=%d err=%v", calls, err)
		}
	})
	t.Run("onRetry error stops", func(t *testing.T) {
		stop := errors.New("ledger down")
		_, err := model.WithRetries(ctx, p, func(context.Context, int) (int, error) { return 0, transient },
			func(model.RetryInfo) error { return stop })
		if !errors.Is(err, stop) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("cancel during the wait", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		slow := model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: time.Hour}
		start := time.Now()
		_, err := model.WithRetries(cctx, slow, func(context.Context, int) (int, error) { return 0, transient },
			func(model.RetryInfo) error { cancel(); return nil })
		if !errors.Is(err, transient) || time.Since(start) > time.Minute {
			t.Errorf("err = %v after %s", err, time.Since(start))
		}
	})
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
		want model.ClassKind
	}{
		{"retryable over a fatal 401", &retryableErr{true, &model.Error{StatusCode: 401}}, model.Transient},
		{"not retryable over a transient 503", &retryableErr{false, &model.Error{StatusCode: 503}}, model.Fatal},
		{"not retryable over a stall", &retryableErr{false, model.ErrStalled}, model.Fatal},
		{"wrapped in turn", fmt.Errorf("metering: %w", &retryableErr{true, errors.New("quota service busy")}), model.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := model.Classify(tc.err); got.Kind != tc.want {
				t.Errorf("Classify = %+v, want %s", got, tc.want)
			}
			calls := 0
			_, err := model.WithRetries(context.Background(), model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Microsecond},
				func(context.Context, int) (int, error) { calls++; return 0, tc.err }, nil)
			want := 1
			if tc.want == model.Transient {
				want = 3
			}
			if calls != want || !errors.Is(err, tc.err) {
				t.Errorf("WithRetries made %d calls (%v), want %d", calls, err, want)
			}
		})
	}
}

// TestRetryPolicyDefaults: the zero policy is the documented one: 6
// attempts, 500ms doubling to a 30s cap, equal jitter (each wait in the
// upper half of its step), Retry-After honoured up to 2 minutes.
func TestRetryPolicyDefaults(t *testing.T) {
	var p model.RetryPolicy
	if n := p.Attempts(); n != 6 {
		t.Errorf("attempts %d, want 6", n)
	}
	for attempt, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 6: 16 * time.Second, 7: 30 * time.Second, 20: 30 * time.Second} {
		for range 50 {
			if d := p.Delay(attempt, model.Class{Kind: model.Transient}); d < want/2 || d > want {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
	if d := p.Delay(1, model.Class{RetryAfter: 90 * time.Second}); d != 90*time.Second {
		t.Errorf("Retry-After 90s gave %s", d)
	}
	if d := p.Delay(1, model.Class{RetryAfter: time.Hour}); d != 2*time.Minute {
		t.Errorf("Retry-After 1h gave %s, want the 2m cap", d)
	}
}
