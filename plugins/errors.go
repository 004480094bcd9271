package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sentinels. A *PluginError wraps one of them (test with errors.Is); their
// messages are prefixed with the package name.
var (
	// ErrTimeout: a call ran past its time and was interrupted. It also
	// matches context.DeadlineExceeded.
	ErrTimeout = errors.New("plugins: call timed out")
	// ErrTrap: the plugin trapped (unreachable, out-of-bounds access, a
	// Go runtime panic that escaped, an abort).
	ErrTrap = errors.New("plugins: plugin trapped")
	// ErrOutOfFuel: the call used all its fuel (Limits.Fuel).
	ErrOutOfFuel = errors.New("plugins: plugin ran out of fuel")
	// ErrOutOfMemory: the plugin hit its memory limit.
	ErrOutOfMemory = errors.New("plugins: plugin ran out of memory")
	// ErrExited: the plugin called exit with a non-zero code.
	ErrExited = errors.New("plugins: plugin exited")
	// ErrOutputTooLarge: the plugin's output exceeded Limits.MaxOutputBytes.
	ErrOutputTooLarge = errors.New("plugins: output too large")
	// ErrInputTooLarge: the input exceeded Limits.MaxInputBytes; the
	// plugin did not run.
	ErrInputTooLarge = errors.New("plugins: input too large")
	// ErrMalformedOutput: the plugin's output is not the JSON the ABI asks
	// for.
	ErrMalformedOutput = errors.New("plugins: malformed output")
	// ErrToolFailed: the plugin answered {"error": …}. The message is the
	// plugin's own.
	ErrToolFailed = errors.New("plugins: plugin reported an error")
	// ErrInvalidInput: the input does not match the tool's input schema;
	// the plugin did not run.
	ErrInvalidInput = errors.New("plugins: input does not match the schema")
	// ErrInvalidModule: the bytes are not a module this runtime can
	// compile and instantiate.
	ErrInvalidModule = errors.New("plugins: invalid module")
	// ErrABIVersion: describe reports an ABI major version the host does
	// not speak, or none.
	ErrABIVersion = errors.New("plugins: unsupported ABI version")
	// ErrInvalidDescription: describe (or a sidecar manifest) is malformed
	// or inconsistent: bad names, schemas that do not compile, missing
	// exports.
	ErrInvalidDescription = errors.New("plugins: invalid description")
	// ErrNoDescription: the module exports no describe and has no sidecar
	// manifest, so it offers nothing the registry can use.
	ErrNoDescription = errors.New("plugins: module has no describe export and no sidecar manifest")
	// ErrTenantLimit: loading the module would pass a cap on what the
	// tenant's modules offer together (Limits.TenantTools,
	// Limits.TenantDescriptionBytes); it is refused.
	ErrTenantLimit = errors.New("plugins: over the tenant's limit")
	// ErrClosed: the module or runtime is closed (or the tool's module was
	// unloaded). The plugin did not run.
	ErrClosed = errors.New("plugins: closed")
	// ErrNotFound: no such tool, validator, policy, export or module.
	ErrNotFound = errors.New("plugins: not found")
	// ErrDenied: the sandbox refused a host function (HTTP to a host or
	// address not allowed, the key-value store when disabled). Plugins see
	// it as an error answer of the host function, not as a failed call.
	ErrDenied = errors.New("plugins: denied by the sandbox")
	// ErrInvalidLimits: a Limits or Options field is out of range.
	ErrInvalidLimits = errors.New("plugins: invalid limits")
	// ErrUnsigned: the tenant requires signed modules
	// (RegistryOptions.Trust) and the module has no signature. It was not
	// compiled.
	ErrUnsigned = errors.New("plugins: module not signed")
	// ErrBadSignature: the module's signature is malformed, by a key the
	// tenant does not trust, or not over the module's bytes. It was not
	// compiled.
	ErrBadSignature = errors.New("plugins: bad module signature")
)

// PluginError is the error of an operation on a plugin: loading it, or
// calling one of its exports. Err wraps one of the package's sentinels.
type PluginError struct {
	// Plugin is the module's name (its file name without .wasm).
	Plugin string
	// Export is what was running: "compile", "describe", "call",
	// "validate", "decide", or a plain module's export.
	Export string
	// Name is the tool, validator or policy concerned, if any.
	Name string
	// Err is the cause.
	Err error
}

// Error renders "plugin NAME: EXPORT [ITEM]: cause".
func (e *PluginError) Error() string {
	var b strings.Builder
	b.WriteString("plugin ")
	b.WriteString(e.Plugin)
	b.WriteString(": ")
	b.WriteString(e.Export)
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(e.Name)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *PluginError) Unwrap() error { return e.Err }

// ErrorType names the failure's class, for telemetry (OpenTelemetry's
// error.type; see host.ErrorTyper): "timeout", "out_of_fuel", "trap", "out_of_memory",
// "exited", "output_too_large", "input_too_large", "malformed_output",
// "tool_failed", "invalid_input", "busy", "closed", "quarantined", else
// "plugin_error".
func (e *PluginError) ErrorType() string {
	var b *busyError
	switch {
	case errors.Is(e.Err, ErrTimeout):
		return "timeout"
	case errors.Is(e.Err, ErrOutOfFuel):
		return "out_of_fuel"
	case errors.Is(e.Err, ErrTrap):
		return "trap"
	case errors.Is(e.Err, ErrOutOfMemory):
		return "out_of_memory"
	case errors.Is(e.Err, ErrExited):
		return "exited"
	case errors.Is(e.Err, ErrOutputTooLarge):
		return "output_too_large"
	case errors.Is(e.Err, ErrInputTooLarge):
		return "input_too_large"
	case errors.Is(e.Err, ErrMalformedOutput):
		return "malformed_output"
	case errors.Is(e.Err, ErrToolFailed):
		return "tool_failed"
	case errors.Is(e.Err, ErrInvalidInput):
		return "invalid_input"
	case errors.As(e.Err, &b):
		return "busy"
	case errors.Is(e.Err, ErrClosed):
		return "closed"
	case errors.Is(e.Err, ErrQuarantined):
		return "quarantined"
	}
	return "plugin_error"
}

// Retryable reports whether the operation may be retried as is: only when
// the plugin surely did not run (its module was closed or unloaded before
// the call started, or no instance became free in time). A timeout, trap or
// error result is not retryable: the call may have had effects.
func (e *PluginError) Retryable() bool {
	var b *busyError
	return errors.Is(e.Err, ErrClosed) || errors.As(e.Err, &b)
}

// newPluginError is a *PluginError whose cause's text is cut to max bytes
// (saying how many were dropped), keeping errors.Is and errors.As on the
// cause working. Errors of a loaded module are made by [Module.fail].
func newPluginError(plugin, export, name string, err error, max int) *PluginError {
	if err != nil {
		if msg := err.Error(); len(msg) > max {
			err = &clippedError{msg: clip(msg, max), err: err}
		}
	}
	return &PluginError{Plugin: plugin, Export: export, Name: name, Err: err}
}

// clippedError is an error whose text was cut (see newPluginError).
type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// guestError is the text a plugin set with Extism's error_set for an
// export that returned: the plugin's own words, whatever they say (they
// may look like the runtime's). instance.call returns it, and classify
// makes it the plugin's answer (ErrToolFailed), never a trap.
type guestError struct{ msg string }

func (e *guestError) Error() string { return e.msg }

// remoteError is an {"error": …} answer (or error_set text): its message
// is the plugin's own. Make it with [Module.remote]; [Module.fail] bounds
// the text.
type remoteError struct{ msg string }

func (e *remoteError) Error() string        { return e.msg }
func (e *remoteError) Is(target error) bool { return target == ErrToolFailed }

// timeoutError is a call interrupted at its deadline.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }
func (e *timeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// busyError: what a call waited for (a free instance, a slot among the
// calls the runtime or the tenant may run at once) did not become free
// before its deadline or cancellation; the plugin did not run.
type busyError struct {
	what  string // "all 4 instances", e.g.
	cause error
}

func (e *busyError) Error() string {
	return fmt.Sprintf("not run: %s stayed busy: %v", e.what, e.cause)
}
func (e *busyError) Unwrap() error { return e.cause }

// detailed wraps a sentinel with details, keeping errors.Is working.
func detailed(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// clip cuts s to at most max bytes, at a UTF-8 boundary, and says how many
// bytes were dropped.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d more bytes cut]", s[:cut], len(s)-cut)
}
