package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/tetratelabs/wazero/sys"
)

// One call of an export on a pooled instance, and what its failures mean.

// errMalformed marks a decode failure: the instance is discarded.
func errMalformed(format string, args ...any) error {
	return detailed(ErrMalformedOutput, format, args...)
}

// invoke runs one export on a pooled instance. decode checks and keeps the
// output; an ErrMalformedOutput from it discards the instance. timeout 0
// means the tenant's CallTimeout (and it can only be shorter).
func (m *Module) invoke(ctx context.Context, export, name, callID string, input []byte, timeout time.Duration, decode func([]byte) error) error {
	_, err := m.invokeMetered(ctx, export, name, callID, input, timeout, decode)
	return err
}

// invokeMetered is invoke, and tells the fuel the call used (its attempts
// together; 0 when it did not run), which the deferred function reads off
// the call's env whatever the call returns.
func (m *Module) invokeMetered(ctx context.Context, export, name, callID string, input []byte, timeout time.Duration, decode func([]byte) error) (fuel int64, err error) {
	fuel, _, err = m.invokeTraced(ctx, export, name, callID, input, timeout, callOpts{}, decode)
	return fuel, err
}

// invokeTraced is invokeMetered; with record, it also tells what the call
// did through the host functions (never nil then), and with replay, those
// answer from a record instead (ReplayCall).
func (m *Module) invokeTraced(ctx context.Context, export, name, callID string, input []byte, timeout time.Duration,
	co callOpts, decode func([]byte) error) (fuel int64, traffic *ledger.ToolTraffic, err error) {
	var env *callEnv
	defer func() {
		if env != nil {
			fuel = env.fuelUsed
		}
		if co.record {
			traffic = env.trafficOf()
			if j := co.journal; j != nil && j.replayed > 0 {
				// What the journal answered is not in the record: it
				// holds what the call did live, and says so.
				traffic.Truncated = true
				traffic.Dropped += j.replayed
			}
		}
	}()
	fail := func(err error) error { return m.fail(export, name, err) }
	if len(input) > m.limits.MaxInputBytes {
		return 0, nil, fail(detailed(ErrInputTooLarge, "%d bytes, the limit is %d", len(input), m.limits.MaxInputBytes))
	}
	if !m.acquire() {
		return 0, nil, fail(ErrClosed)
	}
	defer m.release()
	defer m.topUp() // after the slots below are given back
	if timeout <= 0 || timeout > m.limits.CallTimeout {
		timeout = m.limits.CallTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := m.budget.startCall(callCtx); err != nil {
		return 0, nil, fail(err)
	}
	defer m.budget.endCall()
	if err := m.rt.calls.acquire(callCtx, m.tenant); err != nil {
		return 0, nil, fail(&busyError{what: fmt.Sprintf("the host's %d concurrent plugin calls (%d a tenant)", m.rt.calls.size, m.rt.calls.perTenant), cause: err})
	}
	defer m.rt.calls.release(m.tenant)
	env = &callEnv{mod: m, export: export, name: name, callID: callID, record: co.record, replay: co.replay, journal: co.journal,
		keyBase: co.keyBase, yielded: time.Now()}
	if env.keyBase == nil {
		env.keyBase = idempotencyBase(m.tenant, "", callID)
	}
	runCtx := context.WithValue(callCtx, envKey{}, env)
	for attempt := 0; ; attempt++ {
		inst, err := m.pool.get(callCtx, m.newInstance)
		if err != nil {
			var ie *instantiateError
			if errors.As(err, &ie) {
				// The module's start function ran, and failed or ran out of
				// time: the plugin's own code, like a call.
				return 0, nil, fail(m.instantiateFailure(ie.err, ctx, callCtx, timeout))
			}
			// Waiting for a free instance: the plugin did not run.
			return 0, nil, fail(&busyError{what: fmt.Sprintf("all %d instances", m.limits.Instances), cause: err})
		}
		inst.stderr.reset()
		m.calls.Add(1)
		env.fuelUsed += inst.startFuel // the start function ran for this call
		inst.startFuel = 0
		inst.env, env.tank = env, inst.tank
		inst.tank.fill(m.limits.Fuel)
		rc, out, err := inst.call(runCtx, export, input)
		if err == nil && inst.tank.settle() {
			err = errOutOfFuel
		}
		used := inst.tank.used()
		m.fuel.Add(used)
		env.fuelUsed += used
		inst.env, env.tank = nil, nil
		if closedBeforeRun(err) && attempt < 2 && callCtx.Err() == nil {
			// The instance exited in an earlier call (exit code 0 closes
			// it too); this call did not run. Retry on another.
			m.discard(inst)
			continue
		}
		if err == nil && env.journal != nil {
			err = env.journal.flushed()
		}
		if err != nil {
			m.discard(inst)
			if j := env.journal; j != nil && j.aborted != nil {
				return 0, nil, fail(j.aborted)
			}
			if inst.tank.exhausted() {
				return 0, nil, fail(detailed(ErrOutOfFuel, "it used %d fuel, the limit of a call (Limits.Fuel)", m.limits.Fuel))
			}
			return 0, nil, fail(m.classify(err, ctx, callCtx, timeout, inst.stderr.String()))
		}
		if rc != 0 {
			m.discard(inst)
			return 0, nil, fail(m.remote(fmt.Sprintf("export %s returned %d without an error message", export, rc)))
		}
		if len(out) > m.limits.MaxOutputBytes {
			m.discard(inst)
			return 0, nil, fail(detailed(ErrOutputTooLarge, "%d bytes, the limit is %d", len(out), m.limits.MaxOutputBytes))
		}
		if err := decode(out); err != nil {
			// A call that failed, even by the plugin's own answer (a
			// panic its kit recovered, {"error": …}), may have left its
			// instance's state half-written: the next call starts on a
			// fresh one.
			m.discard(inst)
			return 0, nil, fail(err)
		}
		m.recycle(inst)
		return 0, nil, nil
	}
}

// callOpts are a tool call's options of invokeTraced: whether it keeps a
// record of its traffic, and how its host calls are answered (a replay of
// its record, its journal) and keyed.
type callOpts struct {
	record  bool
	replay  *replayer
	journal *journal
	keyBase []byte // for idempotency keys (default: the tenant's and the call id)
}

// closedBeforeRun reports whether err is go-sdk's (or the fast path's)
// refusal to call an instance that exited in an earlier call: the call did
// not run. A plugin's error_set text saying the same is the plugin's
// answer, not this.
func closedBeforeRun(err error) bool {
	var guest *guestError
	return err != nil && !errors.As(err, &guest) && err.Error() == "module is closed"
}

// classify turns an Extism/wazero call error into one of the package's.
// Where the error came from decides what it is, never what it says: the
// plugin's own error_set text (a *guestError, told apart by
// instance.call) is the plugin's answer, ErrToolFailed, whatever it says;
// everything else is the runtime's, and only the runtime's own words are
// read to tell a trap, an interruption or running out of memory apart.
func (m *Module) classify(err error, parent, callCtx context.Context, timeout time.Duration, stderr string) error {
	var guest *guestError
	if errors.As(err, &guest) {
		return m.remote(guest.msg)
	}
	for _, known := range []error{ErrOutputTooLarge, ErrOutOfMemory} {
		if errors.Is(err, known) { // said already by the host's own code (a JavaScript engine's driver, jsvm.go)
			return err
		}
	}
	if c := m.runtimeFailure(err, parent, callCtx, timeout, stderr); c != nil {
		return c
	}
	// An error of the runtime that names no known cause (a failure of
	// Extism's kernel, an export of the wrong type): the call failed, and
	// not by the plugin's own answer.
	return detailed(ErrTrap, "%s%s", firstLine(err.Error()), stderrSuffix(stderr))
}

// runtimeFailure recognises an error of wazero or Extism (never a
// plugin's error_set text): an exit, an interruption, a trap, running out
// of memory. It returns nil for an error it does not recognise. Of a trap's
// text only the first line is wazero's own; the stack trace after it names
// the module's functions, which the plugin chose.
func (m *Module) runtimeFailure(err error, parent, callCtx context.Context, timeout time.Duration, stderr string) error {
	interrupted := func() error {
		if parent.Err() != nil && !errors.Is(parent.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("call cancelled: %w", parent.Err())
		}
		return &timeoutError{msg: fmt.Sprintf("timed out after %s (interrupted)", timeout)}
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			return interrupted()
		}
		if outOfMemory(stderr) {
			return m.oom(stderr)
		}
		return detailed(ErrExited, "exit code %d%s", exit.ExitCode(), stderrSuffix(stderr))
	}
	if callCtx.Err() != nil {
		return interrupted()
	}
	msg := err.Error()
	if msg == "stack overflow" { // wazero's ErrRuntimeStackOverflow, returned as is
		return detailed(ErrTrap, "stack overflow: the call nested deeper than the host's native stack allows")
	}
	first := firstLine(msg)
	if strings.Contains(first, "wasm error") || strings.Contains(msg, "\nwasm stack trace:") ||
		strings.Contains(first, "recovered by wazero") || first == "module is closed" ||
		strings.HasPrefix(first, "failed to initialize runtime") {
		if outOfMemory(stderr) || strings.Contains(first, "out of memory") {
			return m.oom(stderr)
		}
		if strings.Contains(stderr, "wasmexport function called before runtime initialization") {
			return detailed(ErrTrap, "%s: a Go plugin built as a command, not a library: build it with "+
				"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared%s", first, stderrSuffix(stderr))
		}
		return detailed(ErrTrap, "%s%s", first, stderrSuffix(stderr))
	}
	return nil
}

// remote is the plugin's own error message, cut to its first 20 lines
// (and, like every error text of a call, to Limits.MaxErrorBytes by
// [Module.fail]).
func (m *Module) remote(msg string) error {
	return &remoteError{msg: firstLines(msg, 20)}
}

// clip cuts a text the plugin returned to Limits.MaxErrorBytes.
func (m *Module) clip(s string) string { return clip(s, m.limits.MaxErrorBytes) }

// fail is the error of an operation on the module: every error of a
// plugin's load or call leaves the package through it, so that whatever
// text the plugin put into it (its error_set or {"error"} answer, its
// stderr quoted in a trap, names and schemas in a description) is cut to
// Limits.MaxErrorBytes, in this one place.
func (m *Module) fail(export, name string, err error) *PluginError {
	return newPluginError(m.name, export, name, err, m.limits.MaxErrorBytes)
}

// instantiateFailure says why an instance could not be made: its start
// function trapped or ran out of time (as a call would), or the module
// cannot be instantiated at all (ErrInvalidModule).
func (m *Module) instantiateFailure(err error, parent, ctx context.Context, timeout time.Duration) error {
	var busy *busyError
	if errors.As(err, &busy) || errors.Is(err, ErrInvalidLimits) {
		return err // the tenant's budget: nothing ran
	}
	for _, known := range []error{ErrOutOfFuel, ErrTrap, ErrTimeout, ErrOutOfMemory, ErrExited} {
		if errors.Is(err, known) { // the start function's, said already (instance.start)
			return fmt.Errorf("instantiating: %w", err)
		}
	}
	c := m.runtimeFailure(err, parent, ctx, timeout, "")
	if c == nil { // not the start function's failure: wazero's or Extism's refusal
		c = detailed(ErrInvalidModule, "%v", oneLine(err))
	}
	return fmt.Errorf("instantiating: %w", c)
}

func (m *Module) oom(stderr string) error {
	return detailed(ErrOutOfMemory, "the limit is %d pages (%d MiB)%s", m.limits.MemoryPages, m.limits.MemoryPages/16, stderrSuffix(stderr))
}

func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// stderrSuffix quotes the first lines of a plugin's stderr for an error.
func stderrSuffix(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	return " (stderr: " + strings.Join(strings.Fields(firstLines(stderr, 3)), " ") + ")"
}
