package plugins_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
)

// Bystanders: healthy modules called over and over while a hostile module
// attacks, to check that the host serves them during the attack, not only
// afterwards.

// span is when something ran.
type span struct{ start, end time.Time }

func (s span) within(o span) bool { return !s.start.Before(o.start) && !s.end.After(o.end) }

// bystanders call get_account of two healthy modules on the hostile
// module's runtime — one of the hostile module's tenant, one of another
// tenant — in a loop each, until stopped.
type bystanders struct {
	names []string // of the callers, for errors; set before they start

	mu     sync.Mutex
	calls  [][]span // completed calls, per caller
	errs   []error
	attack span // from the start of the attack's first run to the end of its last

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// startBystanders starts the callers: get_account loaded as "bystander"
// for tenant, and for tenant+"-other".
func startBystanders(t *testing.T, rt *plugins.Runtime, tenant string) *bystanders {
	t.Helper()
	b := &bystanders{stop: make(chan struct{})}
	limits := plugins.Limits{CallTimeout: 2 * time.Minute}
	var tools []host.Tool
	for _, tn := range []string{tenant, tenant + "-other"} {
		m := plugintestLoad(t, rt, "bystander", getAccountWasm(t), tn, limits)
		tool, _ := m.Tool("get_account")
		tools = append(tools, tool)
		b.names = append(b.names, fmt.Sprintf("get_account of tenant %s", tn))
	}
	b.calls = make([][]span, len(tools))
	for i, tool := range tools {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for {
				select {
				case <-b.stop:
					return
				default:
				}
				s := span{start: time.Now()}
				res, err := tool.Call(context.Background(), hostCall("get_account", `{"account_id":"42"}`))
				s.end = time.Now()
				b.mu.Lock()
				switch {
				case err != nil:
					b.errs = append(b.errs, fmt.Errorf("%s: %w", b.names[i], err))
				case !strings.Contains(res.Output, `"account_id":"42"`):
					b.errs = append(b.errs, fmt.Errorf("%s answered %q", b.names[i], res.Output))
				default:
					b.calls[i] = append(b.calls[i], s)
				}
				b.mu.Unlock()
			}
		}()
	}
	t.Cleanup(b.halt) // before the modules close (cleanups run last first)
	return b
}

func (b *bystanders) halt() {
	b.stopOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// covered reports whether every caller completed a call wholly within the
// attack.
func (b *bystanders) covered() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, calls := range b.calls {
		found := false
		for _, c := range calls {
			found = found || c.within(b.attack)
		}
		if !found {
			return false
		}
	}
	return true
}

// during runs attack (which checks its own outcome) over and over, back to
// back, until every bystander has completed a call that started after the
// attack's first run started and ended before its last run ended; then it
// stops the bystanders and fails the test if any of their calls failed. An
// attack that takes a second runs once; one that takes a millisecond runs
// until the bystanders got a call in.
func (b *bystanders) during(t *testing.T, what string, attack func()) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	runs := 0
	b.mu.Lock()
	b.attack = span{start: time.Now()}
	b.mu.Unlock()
	for {
		attack()
		runs++
		b.mu.Lock()
		b.attack.end = time.Now()
		b.mu.Unlock()
		if t.Failed() || b.covered() {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: after %d runs, the bystanders completed no call while it ran", what, runs)
			break
		}
	}
	b.halt()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, err := range b.errs {
		t.Errorf("during %s: %v", what, err)
	}
	during := make([]int, len(b.calls))
	for i, calls := range b.calls {
		for _, c := range calls {
			if c.within(b.attack) {
				during[i]++
			}
		}
	}
	t.Logf("%s ran %d times in %s; the bystanders completed %v calls meanwhile", what, runs, b.attack.end.Sub(b.attack.start).Round(time.Millisecond), during)
}
