package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// defaultQueueTimeout is rate_limit.queue_timeout when it is 0.
const defaultQueueTimeout = 30 * time.Second

// Admission: every source of runs — a request of the API, a schedule's
// occurrence, a delegate call's child run, an evaluation, an imported run
// resumed — is admitted by one function, admitWork, under the same bounds:
// the server's shutdown, the tenant's budgets, the process's runs in
// flight (max_runs), the tenant's concurrent runs and its rate limit. A
// request of the API paid the rate limit as it was authenticated; every
// other source takes a token of the same bucket when it is admitted.

// runSource names what would start a run, for admitWork.
type runSource string

// The sources of runs.
const (
	sourceAPI      runSource = "api"      // a request: its rate limit paid as it was authenticated
	sourceSchedule runSource = "schedule" // a schedule's occurrence
	sourceDelegate runSource = "delegate" // a delegate call's child run
	sourceImport   runSource = "import"   // an imported run resumed
)

// run names a run of the source, with its article: "an import run".
func (s runSource) run() string {
	if s == sourceImport {
		return "an import run"
	}
	return "a " + string(s) + " run"
}

// admitRefusal is why a new run or task may not start now: the HTTP status,
// the API's error code and message, and whether to retry after a second.
// It is an error, for the sources that are not requests.
type admitRefusal struct {
	status        int
	code, message string
	retry         bool
}

// Error is the refusal's message.
func (no *admitRefusal) Error() string { return no.message }

// Retryable reports whether the refusal passes by itself (runs in flight,
// a rate), as opposed to a budget spent or a server shutting down.
func (no *admitRefusal) Retryable() bool { return no.retry }

// write answers the refusal as the API does.
func (no *admitRefusal) write(w http.ResponseWriter) {
	if no.retry {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, no.status, no.code, "%s", no.message)
}

// admission is admitRun for any protocol: it returns the admitRefusal rather
// than answering it.
func (s *Server) admission(r *http.Request, t *tenant, id string) (release func(), no *admitRefusal) {
	return s.admitWork(r.Context(), t, id, sourceAPI)
}

// AdmitRun admits a run of tenant's session id that no request of the API
// starts — an imported run resumed, a source of runs outside the API — under
// the bounds a message of the API is admitted under (see admitWork), its
// rate limit included. release gives the place back once the run is in
// flight (host.Session.Start or Resume returned) or was not started. An
// error is an *AdmitError: the status, code and words the API would
// answer, and whether the refusal passes by itself (Retryable).
func (s *Server) AdmitRun(ctx context.Context, tenant, id string) (release func(), err error) {
	t, ok := s.tenants[tenant]
	if !ok {
		return nil, &AdmitError{Status: http.StatusNotFound, Code: codeNotFound, Message: fmt.Sprintf("no tenant %q", tenant)}
	}
	return s.admitSource(ctx, t, id, sourceImport)
}

// AdmitError is a refusal of [Server.AdmitRun].
type AdmitError struct {
	// Status and Code are the HTTP status and the API's error code the
	// refusal answers with (402 budget_exceeded, 429 rate_limited, 503
	// unavailable).
	Status int
	Code   string
	// Message says which bound refused, naming its setting.
	Message string
	// Retry tells that the refusal passes by itself (runs in flight, a
	// rate): retry after a second.
	Retry bool
}

func (e *AdmitError) Error() string { return e.Message }

// Retryable reports e.Retry.
func (e *AdmitError) Retryable() bool { return e.Retry }

// admitSource is admitWork with its refusal as an *AdmitError.
func (s *Server) admitSource(ctx context.Context, t *tenant, id string, src runSource) (release func(), err error) {
	release, no := s.admitWork(ctx, t, id, src)
	if no != nil {
		return nil, &AdmitError{Status: no.status, Code: no.code, Message: no.message, Retry: no.retry}
	}
	return release, nil
}

// admitWork decides whether a run of session id may start now, for src
// (the bound of the end user that ctx names, rate_limit.per_user, is
// checked first):
// not while the server shuts down, past the tenant's budget, past the
// process's runs in flight (max_runs) or the tenant's concurrent runs (a
// message to a session whose run is in flight joins it: no new run), nor,
// for a source other than a request (which paid it as it was
// authenticated), past the tenant's rate limit. Admitted, the run's place
// under the bounds is held until release is called — once Start
// returned, when the run is in flight (or the message joined one, or was
// refused) — so that admissions at once cannot all pass the bounds.
func (s *Server) admitWork(ctx context.Context, t *tenant, id string, src runSource) (release func(), no *admitRefusal) {
	if no := s.refuseAny(ctx, t); no != nil {
		return nil, no
	}
	if t.host.IsRunning(id) {
		// The message joins the run in flight.
		if no := t.rate(src); no != nil {
			return nil, no
		}
		return func() {}, nil
	}
	// The end user's bound first: a person past it does not wait in the
	// tenant's queue.
	unuser, no := t.admitUser(ctx, id)
	if no != nil {
		return nil, no
	}
	var unreserve func()
	if n := t.cfg.RateLimit.ConcurrentRuns; n > 0 {
		var ok bool
		if unreserve, ok = t.slots.reserve(t.host, id, n); !ok {
			if t.cfg.RateLimit.QueueRuns == 0 {
				unuser()
				return nil, &admitRefusal{status: http.StatusTooManyRequests, code: codeRateLimited, retry: true,
					message: fmt.Sprintf("tenant %s has %d runs in flight, its limit (rate_limit.concurrent_runs)", t.name, n)}
			}
			// Wait for a place, in the tenant's queue (holding no place
			// of the process's meanwhile).
			start := time.Now()
			var err error
			unreserve, err = t.slots.wait(ctx, t.host, id, n, t.cfg.RateLimit.QueueRuns, cmp.Or(time.Duration(t.cfg.RateLimit.QueueTimeout), defaultQueueTimeout))
			s.metrics.observeQueueWait(t.name, "runs", time.Since(start), err)
			if err != nil {
				unuser()
				why := fmt.Sprintf("waited %s in the queue (rate_limit.queue_timeout) for a place", time.Since(start).Round(time.Millisecond))
				if errors.Is(err, errQueueFull) {
					why = fmt.Sprintf("%d requests wait already (rate_limit.queue_runs)", t.cfg.RateLimit.QueueRuns)
				}
				return nil, &admitRefusal{status: http.StatusTooManyRequests, code: codeRateLimited, retry: true,
					message: fmt.Sprintf("tenant %s has %d runs in flight, its limit (rate_limit.concurrent_runs), and %s", t.name, n, why)}
			}
		}
	}
	unadmit, no := s.admitProcess(ctx, t)
	if no != nil {
		unuser()
		if unreserve != nil {
			unreserve()
		}
		return nil, no
	}
	release = func() { unuser(); unadmit() }
	if unreserve != nil {
		release = func() { unreserve(); unuser(); unadmit() }
	}
	// The rate last: a run refused for another bound spends no token.
	if no := t.rate(src); no != nil {
		release()
		return nil, no
	}
	return release, nil
}

// waitToken waits for a token of the tenant's rate limit, in its queue
// (rate_limit.queue_requests), for a request the bucket refused: ok once
// it has one, else why it may not wait ("" without a queue; the queue
// full, a turn later than queue_timeout, the request gone), for the
// refusal.
func (s *Server) waitToken(ctx context.Context, t *tenant) (ok bool, why string) {
	max := t.cfg.RateLimit.QueueRequests
	if max == 0 {
		return false, ""
	}
	start := time.Now()
	var err error
	defer func() { s.metrics.observeQueueWait(t.name, "requests", time.Since(start), err) }()
	if t.waitingTokens.Add(1) > int64(max) {
		t.waitingTokens.Add(-1)
		err = errQueueFull
		return false, fmt.Sprintf(", and %d requests wait already (rate_limit.queue_requests)", max)
	}
	defer t.waitingTokens.Add(-1)
	timeout := cmp.Or(time.Duration(t.cfg.RateLimit.QueueTimeout), defaultQueueTimeout)
	res := t.limiter.Reserve()
	if !res.OK() || res.Delay() > timeout {
		res.Cancel()
		err = errQueueTimeout
		return false, fmt.Sprintf(", and its turn would come past rate_limit.queue_timeout (%s)", timeout)
	}
	timer := time.NewTimer(res.Delay())
	defer timer.Stop()
	select {
	case <-timer.C:
		return true, ""
	case <-ctx.Done():
		res.Cancel()
		err = ctx.Err()
		return false, ", and the request went away while it waited"
	}
}

// rate takes a token of the tenant's rate limit for a source other than a
// request of the API, which took its own as it was authenticated.
func (t *tenant) rate(src runSource) *admitRefusal {
	if src == sourceAPI || t.limiter == nil || t.limiter.Allow() {
		return nil
	}
	return &admitRefusal{status: http.StatusTooManyRequests, code: codeRateLimited, retry: true,
		message: fmt.Sprintf("tenant %s is past its rate limit of %g requests a second (rate_limit.requests_per_second; %s counts as a request)", t.name, t.cfg.RateLimit.RequestsPerSecond, src.run())}
}

// admitProcess holds a place for a new run of tenant t under the
// process's bound (max_runs): the runs in flight in every tenant's host
// and the admissions in progress, counted from their admission on so that
// requests at once cannot all pass it. Past it, the run waits its turn in
// the process's queue when there is one (queue_runs), else it is refused.
// release gives the place back (once Start returned, the run counts as in
// flight).
func (s *Server) admitProcess(ctx context.Context, t *tenant) (release func(), no *admitRefusal) {
	refusal := func(why string) *admitRefusal {
		return &admitRefusal{status: http.StatusServiceUnavailable, code: codeUnavailable, retry: true,
			message: fmt.Sprintf("the server has %d runs in flight, its limit (max_runs)%s: retry shortly, or send to another host", s.cfg.MaxRuns, why)}
	}
	q := s.runq
	if q == nil || !q.busy() {
		// (With a queue, a newcomer does not overtake the runs waiting.)
		if s.takeProcess() {
			return s.processRelease(), nil
		}
		if q == nil {
			return nil, refusal("")
		}
	}
	start := time.Now()
	timeout := cmp.Or(time.Duration(s.cfg.QueueTimeout), defaultQueueTimeout)
	err := q.wait(ctx, t.name, s.takeProcess, timeout)
	s.metrics.observeQueueWait(t.name, "max_runs", time.Since(start), err)
	switch {
	case errors.Is(err, errQueueFull):
		return nil, refusal(fmt.Sprintf(", and %d runs wait already (queue_runs)", s.cfg.QueueRuns))
	case errors.Is(err, errQueueShare):
		return nil, refusal(fmt.Sprintf(", and tenant %s's runs hold half of the queue's places already (queue_runs %d)", t.name, s.cfg.QueueRuns))
	case err != nil:
		return nil, refusal(fmt.Sprintf(", and this one waited %s in the queue (queue_timeout) for a place", time.Since(start).Round(time.Millisecond)))
	}
	return s.processRelease(), nil
}

// takeProcess takes a place under max_runs if one is free.
func (s *Server) takeProcess() bool {
	if s.admitting.Add(1)+int64(s.runsInFlight()) > int64(s.cfg.MaxRuns) {
		s.admitting.Add(-1)
		return false
	}
	return true
}

// processRelease returns the release of a place taken under max_runs,
// which tells the queue's next in turn to look (no run may have started).
func (s *Server) processRelease() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.admitting.Add(-1)
			if s.runq != nil {
				s.runq.wake()
			}
		})
	}
}

// runsInFlight counts the runs in flight in every tenant's host.
func (s *Server) runsInFlight() int {
	n := 0
	for _, t := range s.tenants {
		n += t.host.Running()
	}
	return n
}

// refuseAny refuses any new work of the tenant: while the server shuts
// down, or past the tenant's budgets.
func (s *Server) refuseAny(ctx context.Context, t *tenant) *admitRefusal {
	if s.closing.Load() {
		return &admitRefusal{status: http.StatusServiceUnavailable, code: codeUnavailable, message: "the server is shutting down; send to another host"}
	}
	if t.budget != nil {
		over, err := t.budget.exceeded(ctx)
		if err != nil {
			s.log.Warn("cannot read the budget's spend; admitting", "tenant", t.name, "err", err)
		}
		if over != nil {
			return &admitRefusal{status: http.StatusPaymentRequired, code: codeBudget, message: over.Error()}
		}
	}
	if t.fuel != nil && t.cfg.PluginFuelRefusesRuns {
		over, err := t.fuel.exceeded(ctx)
		if err != nil {
			s.log.Warn("cannot read the plugin budget; admitting", "tenant", t.name, "err", err)
		}
		if over != nil {
			return &admitRefusal{status: http.StatusPaymentRequired, code: codeBudget, message: over.Error()}
		}
	}
	return nil
}
