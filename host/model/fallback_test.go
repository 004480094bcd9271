package model_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/model"
)

// TestClassifyCauses: each failure is given the cause a policy's ByCause
// names it by.
func TestClassifyCauses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want model.Cause
	}{
		{&model.Error{StatusCode: 429, Message: "Rate limit exceeded"}, model.CauseRateLimit},
		{&model.Error{StatusCode: 429, MidStream: true}, model.CauseRateLimit},
		{&model.Error{StatusCode: 502, Message: "Provider returned error"}, model.CauseServer},
		{&model.Error{StatusCode: 503, Message: "No allowed providers are available for the selected model."}, model.CauseServer},
		{&model.Error{MidStream: true, Message: "upstream error"}, model.CauseServer},
		{io.ErrUnexpectedEOF, model.CauseNetwork},
		{model.ErrStalled, model.CauseStream},
		{model.ErrIncompleteStream, model.CauseStream},
		{fmt.Errorf("awaiting headers: %w", context.DeadlineExceeded), model.CauseTimeout},
		{timeoutErr{}, model.CauseTimeout},
		{&model.Error{StatusCode: 400, Code: "context_length_exceeded"}, model.CauseOverflow},
		{&model.Error{StatusCode: 404, Message: "No endpoints found for x/y."}, model.CauseUnavailable},
		{&model.Error{StatusCode: 401}, model.CauseOther},
		{context.Canceled, model.CauseOther},
	} {
		if got := model.Classify(tc.err); got.Cause != tc.want {
			t.Errorf("Classify(%v).Cause = %q, want %q", tc.err, got.Cause, tc.want)
		}
	}
}

// timeoutErr is an error that says itself it is retryable and is a
// deadline, as the host's chunk timeouts are.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "the model stream was silent (chunk timeout)" }
func (timeoutErr) Retryable() bool { return true }
func (timeoutErr) Unwrap() error   { return context.DeadlineExceeded }

// TestClassifyUnavailable: a model that is not served is told from a bad
// request: the first may be answered by another model, the second by
// none.
func TestClassifyUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *model.Error
		want model.ClassKind
	}{
		{"OpenRouter, no endpoint", &model.Error{StatusCode: 404, Code: "404", Message: "No endpoints found for acme/gone."}, model.Unavailable},
		{"OpenRouter, unknown id", &model.Error{StatusCode: 400, Code: "400", Message: "acme/typo is not a valid model ID"}, model.Unavailable},
		{"OpenAI", &model.Error{StatusCode: 404, Code: "model_not_found", Type: "invalid_request_error", Message: "The model `gpt-9` does not exist or you do not have access to it."}, model.Unavailable},
		{"withdrawn", &model.Error{StatusCode: 400, Message: "The model `llama-2-70b` has been decommissioned and is no longer supported."}, model.Unavailable},
		{"upstream says so", &model.Error{StatusCode: 400, Message: "Provider returned error", Metadata: []byte(`{"raw":"{\"error\":{\"message\":\"model not found\"}}"}`)}, model.Unavailable},
		{"bad input", &model.Error{StatusCode: 400, Code: "400", Message: "messages: the tool result's call is unknown"}, model.Fatal},
		{"bad input that names the model", &model.Error{StatusCode: 400, Message: "acme/x does not support tools"}, model.Fatal},
		{"credits", &model.Error{StatusCode: 402, Message: "Insufficient credits"}, model.Fatal},
		{"overflow", &model.Error{StatusCode: 400, Message: "This endpoint's maximum context length is 8192 tokens"}, model.ContextOverflow},
		{"mid-stream", &model.Error{MidStream: true, StatusCode: 404, Message: "No endpoints found"}, model.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := model.Classify(tc.err); got.Kind != tc.want {
				t.Errorf("Classify = %+v, want %s", got, tc.want)
			}
		})
	}
}

// TestRetryPolicyByCause: a cause's policy takes its zero fields from the
// policy it is in, and decides that cause's waits alone.
func TestRetryPolicyByCause(t *testing.T) {
	p := model.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second, MaxDelay: 4 * time.Second, Jitter: model.JitterNone,
		ByCause: map[model.Cause]model.RetryPolicy{model.CauseRateLimit: {MaxAttempts: 10, BaseDelay: 5 * time.Second, MaxDelay: time.Minute}}}
	rl := p.For(model.CauseRateLimit)
	if rl.MaxAttempts != 10 || rl.BaseDelay != 5*time.Second || rl.Jitter != model.JitterNone || rl.ByCause != nil {
		t.Errorf("For(rate_limit) = %+v", rl)
	}
	if s := p.For(model.CauseServer); s.MaxAttempts != 3 || s.BaseDelay != time.Second || s.ByCause != nil {
		t.Errorf("For(server) = %+v", s)
	}
	if d := p.Delay(3, model.Class{Kind: model.Transient, Cause: model.CauseRateLimit}); d != 20*time.Second {
		t.Errorf("a third 429's wait = %s, want 20s (5s doubled twice, no jitter)", d)
	}
	if d := p.Delay(3, model.Class{Kind: model.Transient, Cause: model.CauseServer}); d != 4*time.Second {
		t.Errorf("a third 502's wait = %s, want 4s (capped)", d)
	}
	if d := p.Delay(3, model.Class{Kind: model.Transient, Cause: model.CauseRateLimit, RetryAfter: 7 * time.Second}); d != 7*time.Second {
		t.Errorf("a 429 with Retry-After 7s waits %s", d)
	}

	// Ten 429s are retried, a fourth 502 is not.
	var calls int
	_, err := model.WithRetries(context.Background(), fast(p), func(context.Context, int) (int, error) {
		calls++
		if calls < 10 {
			return 0, &model.Error{StatusCode: 429}
		}
		return 1, nil
	}, nil)
	if err != nil || calls != 10 {
		t.Errorf("nine 429s then success: err %v after %d calls", err, calls)
	}
	calls = 0
	_, err = model.WithRetries(context.Background(), fast(p), func(context.Context, int) (int, error) {
		calls++
		return 0, &model.Error{StatusCode: 502}
	}, nil)
	if err == nil || calls != 3 {
		t.Errorf("502s: err %v after %d calls, want the third to be the last", err, calls)
	}
}

// fast scales a policy's waits down to microseconds, keeping its shape.
func fast(p model.RetryPolicy) model.RetryPolicy {
	scale := func(d time.Duration) time.Duration { return d / time.Millisecond * time.Microsecond }
	p.BaseDelay, p.MaxDelay = scale(p.BaseDelay), scale(p.MaxDelay)
	byCause := map[model.Cause]model.RetryPolicy{}
	for c, q := range p.ByCause {
		q.BaseDelay, q.MaxDelay = scale(q.BaseDelay), scale(q.MaxDelay)
		byCause[c] = q
	}
	p.ByCause = byCause
	return p
}

// TestRetryPolicyJitter: none waits the computed wait, full anywhere up to
// it, equal (the default) in its upper half.
func TestRetryPolicyJitter(t *testing.T) {
	c := model.Class{Kind: model.Transient, Cause: model.CauseServer}
	base := model.RetryPolicy{BaseDelay: time.Second, MaxDelay: time.Second}
	for _, tc := range []struct {
		jitter   model.Jitter
		min, max time.Duration
	}{{model.JitterNone, time.Second, time.Second}, {model.JitterFull, 0, time.Second}, {"", 500 * time.Millisecond, time.Second}, {model.JitterEqual, 500 * time.Millisecond, time.Second}} {
		p := base
		p.Jitter = tc.jitter
		var below bool
		for range 200 {
			d := p.Delay(1, c)
			if d < tc.min || d > tc.max {
				t.Fatalf("jitter %q: a wait of %s, want within [%s, %s]", tc.jitter, d, tc.min, tc.max)
			}
			below = below || d < 500*time.Millisecond
		}
		if tc.jitter == model.JitterFull && !below {
			t.Errorf("full jitter: 200 waits, none below half the wait")
		}
	}
}

// TestRetryPolicyTimeBound: retries stop when the next wait would end past
// MaxElapsed, however many attempts are left, and a Retry-After past it
// is not waited for.
func TestRetryPolicyTimeBound(t *testing.T) {
	p := model.RetryPolicy{MaxAttempts: 100, BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond, Jitter: model.JitterNone, MaxElapsed: 100 * time.Millisecond}
	var calls int
	var infos []model.RetryInfo
	_, err := model.WithFallback(context.Background(), p, []string{"a", "b"}, func(_ context.Context, m string, _ int) (int, error) {
		calls++
		return 0, &model.Error{StatusCode: 503}
	}, func(ri model.RetryInfo) error { infos = append(infos, ri); return nil })
	if err == nil {
		t.Fatal("every attempt failed, and WithFallback succeeded")
	}
	// Each model gets its own 100ms: at most 6 attempts each (every wait
	// is at least 20ms: 0, 20, …, 100ms), however fast the machine, and
	// at least one each however slow — never the 100 attempts allowed.
	if calls < 2 || calls > 12 {
		t.Errorf("%d calls, want 1 to 6 a model", calls)
	}
	var gaveUp []string
	for _, ri := range infos {
		if ri.Fallback != "" {
			gaveUp = append(gaveUp, ri.Model+"→"+ri.Fallback+": "+ri.GaveUp)
		}
	}
	if want := []string{"a→b: the retry time bound of 100ms"}; !slices.Equal(gaveUp, want) {
		t.Errorf("fallbacks %q, want %q", gaveUp, want)
	}

	calls = 0
	waited := false
	_, err = model.WithRetries(context.Background(), p, func(context.Context, int) (int, error) {
		calls++
		return 0, &model.Error{StatusCode: 429, RetryAfter: time.Hour}
	}, func(model.RetryInfo) error { waited = true; return errors.New("it meant to wait") })
	if err == nil || calls != 1 || waited {
		t.Errorf("Retry-After 1h past a 100ms bound: err %v after %d calls (meant to wait: %v)", err, calls, waited)
	}
}

// TestWithFallback: the next model is asked when one is not served or its
// retries run out, at once; a bad request, an overflow and cancellation
// end it on the model they happen on; attempts count over every model.
func TestWithFallback(t *testing.T) {
	p := model.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}
	type call struct {
		model   string
		attempt int
	}
	run := func(fail func(m string, attempt int) error) ([]call, []model.RetryInfo, string, error) {
		var calls []call
		var infos []model.RetryInfo
		v, err := model.WithFallback(context.Background(), p, []string{"a", "b", "c"}, func(_ context.Context, m string, attempt int) (string, error) {
			calls = append(calls, call{m, attempt})
			if err := fail(m, attempt); err != nil {
				return "", err
			}
			return m, nil
		}, func(ri model.RetryInfo) error { infos = append(infos, ri); return nil })
		return calls, infos, v, err
	}

	t.Run("not served", func(t *testing.T) {
		calls, infos, v, err := run(func(m string, _ int) error {
			if m == "a" {
				return &model.Error{StatusCode: 404, Message: "No endpoints found for a."}
			}
			return nil
		})
		if err != nil || v != "b" || !slices.Equal(calls, []call{{"a", 1}, {"b", 2}}) {
			t.Fatalf("answered %q (%v) after %v, want b's after one call to a", v, err, calls)
		}
		if len(infos) != 1 || infos[0].Fallback != "b" || infos[0].Model != "a" || infos[0].Delay != 0 || infos[0].GaveUp != "" || infos[0].Class.Kind != model.Unavailable {
			t.Errorf("told %+v", infos)
		}
	})
	t.Run("retries spent", func(t *testing.T) {
		calls, infos, v, err := run(func(m string, _ int) error {
			if m != "c" {
				return &model.Error{StatusCode: 502}
			}
			return nil
		})
		if err != nil || v != "c" || !slices.Equal(calls, []call{{"a", 1}, {"a", 2}, {"b", 3}, {"b", 4}, {"c", 5}}) {
			t.Fatalf("answered %q (%v) after %v", v, err, calls)
		}
		var told []string
		for _, ri := range infos {
			told = append(told, fmt.Sprintf("%d %s→%s %s", ri.Attempt, ri.Model, ri.Fallback, ri.GaveUp))
		}
		if want := []string{"1 a→ ", "2 a→b 2 attempts", "3 b→ ", "4 b→c 2 attempts"}; !slices.Equal(told, want) {
			t.Errorf("told %q, want %q", told, want)
		}
	})
	t.Run("every model fails", func(t *testing.T) {
		calls, _, _, err := run(func(m string, _ int) error {
			return &model.Error{StatusCode: 404, Message: "No endpoints found for " + m}
		})
		if err == nil || !strings.Contains(err.Error(), "for c") || len(calls) != 3 {
			t.Errorf("err %v after %v, want c's error after one call each", err, calls)
		}
	})
	for name, fatal := range map[string]error{
		"bad request": &model.Error{StatusCode: 400, Message: "messages: invalid"},
		"overflow":    &model.Error{StatusCode: 400, Code: "context_length_exceeded"},
		"credits":     &model.Error{StatusCode: 402, Message: "Insufficient credits"},
	} {
		t.Run(name, func(t *testing.T) {
			calls, infos, _, err := run(func(string, int) error { return fatal })
			if !errors.Is(err, fatal) || len(calls) != 1 || len(infos) != 0 {
				t.Errorf("err %v after %v (told %v), want a's error after one call, no fallback", err, calls, infos)
			}
		})
	}
	t.Run("an error from onRetry stops it", func(t *testing.T) {
		stop := errors.New("ledger down")
		var calls int
		_, err := model.WithFallback(context.Background(), p, []string{"a", "b"}, func(context.Context, string, int) (int, error) {
			calls++
			return 0, &model.Error{StatusCode: 404}
		}, func(model.RetryInfo) error { return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("err %v after %d calls", err, calls)
		}
	})
}

// TestRetryPolicyValidate: what a configuration may get wrong is named.
func TestRetryPolicyValidate(t *testing.T) {
	if err := (model.RetryPolicy{}).Validate(); err != nil {
		t.Errorf("the zero policy: %v", err)
	}
	good := model.RetryPolicy{MaxAttempts: 3, Jitter: model.JitterFull, MaxElapsed: time.Minute,
		ByCause: map[model.Cause]model.RetryPolicy{model.CauseRateLimit: {MaxAttempts: 8}, model.CauseNetwork: {Jitter: model.JitterNone}}}
	if err := good.Validate(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	bad := model.RetryPolicy{MaxAttempts: -1, BaseDelay: -time.Second, Jitter: "wild",
		ByCause: map[model.Cause]model.RetryPolicy{
			"weather":            {},
			model.CauseServer:    {MaxElapsed: -1},
			model.CauseRateLimit: {ByCause: map[model.Cause]model.RetryPolicy{model.CauseServer: {}}},
			model.CauseStream:    {Jitter: "some"},
			model.CauseOverflow:  {},
		}}
	err := bad.Validate()
	for _, want := range []string{"MaxAttempts is negative", "BaseDelay is negative", `Jitter "wild"`, `unknown cause "weather"`,
		`ByCause["server"].MaxElapsed is negative`, `ByCause["rate_limit"].ByCause`, `ByCause["stream"].Jitter "some"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q in it", err, want)
		}
	}
}
