package plugins

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	extism "github.com/extism/go-sdk"
)

// Limits is the sandbox of a tenant's plugins. Every field is explicit and
// deny-by-default: the zero Limits gives a plugin memory, time and output
// bounds, and Extism vars within their own bound, and nothing else (no
// HTTP, no key-value store).
// Plugins never get a filesystem or environment variables; there is no
// field to grant them.
//
// Each field documents its default and the field of Extism's Manifest it
// sets, if any (see [Limits.Manifest]).
type Limits struct {
	// MemoryPages caps each instance's linear memory, in 64 KiB Wasm
	// pages. A plugin that needs more traps with ErrOutOfMemory. Manifest:
	// Memory.MaxPages. Default: 0, which means 512 pages (32 MiB).
	MemoryPages uint32
	// MaxModuleBytes bounds the size of a module's bytes; a larger one is
	// refused before anything parses or compiles it, and a module file
	// (a watched directory's, [ReadSourceWithin]'s) is read no further
	// than this. Default: 0, which means 64 MiB.
	MaxModuleBytes int
	// CompileTimeout bounds compiling a module the runtime has not
	// compiled before (in a compiler process; see Options.CompileInProcess):
	// past it, the compile is stopped and the module refused. A Go plugin
	// of 3 MB compiles in under a second here. Default: 0, which means
	// 10s (100s in a binary built with the race detector, which slows
	// compiling about tenfold).
	CompileTimeout time.Duration
	// MaxCompileBytes bounds the memory compiling one module may take (in
	// the compiler process, beyond what it uses at start); past it, the
	// compile is stopped and the module refused. Default: 0, which means
	// 1 GiB.
	MaxCompileBytes int64
	// CallTimeout bounds one call of an export, initialisation included,
	// and the module's start function (which runs, as a call, when an
	// instance is created). The guest cannot hold it off: whatever it
	// runs, it returns to the host at least once per slice of fuel
	// (1,000,000, about 0.1 to 1 ms of work here; see "The sandbox's
	// bounds" in docs/plugins.md), where the deadline is checked, and so
	// does every host function it calls. A tool's own timeout can only
	// shorten it. Default: 0, which means 5s.
	CallTimeout time.Duration
	// Fuel bounds the work of one call (and of a start function): the
	// fuel a module is charged as it runs, about one unit per WebAssembly
	// instruction, per 16 bytes a bulk memory instruction moves, and per
	// unit of work of the host functions it calls (see "Fuel" in
	// docs/plugins.md). A call that runs out fails with ErrOutOfFuel.
	// Default: 0, which means 10,000,000,000 (about a second of a tight
	// loop here).
	Fuel int64
	// MaxTableElements bounds the elements of a module's tables together
	// (a funcref table of 2^27 elements is 1 GiB of host memory): a module
	// whose tables start with more is refused, and table.grow fails
	// past it. Each element counts 8 bytes of the instance's memory
	// against TenantMemoryBytes. A Go plugin's table has about 6,500.
	// Default: 0, which means 131,072 (1 MiB).
	MaxTableElements uint32
	// Instances bounds the live instances of one module (the pool): at
	// most this many calls of the module run at once; more wait for a free
	// instance within their deadline. Default: 0, which means 4.
	Instances int
	// WarmInstances is how many idle instances the module keeps ready, so
	// that a burst of calls, or the call after one whose instance was
	// thrown away (a failure; a JavaScript engine whose memory grew),
	// pays no instantiation: they are made in the background once the
	// module is loaded, and again when an instance is thrown away or a
	// call ends with fewer idle. Making one runs the module's code (its
	// start function, describe), so it takes, as a call does, a slot of
	// the pool (Instances), of the host's concurrent calls
	// (Options.MaxConcurrentCalls) and of the tenant's
	// (TenantConcurrentCalls), and the tenant's room for an instance
	// (TenantInstances, TenantMemoryBytes) — each only when free and
	// wanted by no call, never waiting and never closing another module's
	// idle instance for it. At most Instances. Default: 0, instances are
	// made as calls need them (the load's first instance is kept).
	WarmInstances int
	// MaxInputBytes bounds the JSON sent to one call. Default: 0, which
	// means 1 MiB.
	MaxInputBytes int
	// MaxOutputBytes bounds the output of one call. Default: 0, which
	// means 1 MiB.
	MaxOutputBytes int
	// MaxVarBytes bounds Extism vars: scratch state a plugin keeps between
	// calls on one instance, held by the host. Instances are pooled and
	// discarded after errors, so vars are a cache, never durable state (the
	// key-value store is). Plain Extism plugins often use them; Extism's own
	// default is the same 1 MiB. Manifest: Memory.MaxVarBytes. Default: 0,
	// which means 1 MiB; -1 disables vars (var_set then traps).
	MaxVarBytes int64
	// MaxLogBytes bounds what one call may log through the log host
	// function (and Extism's own log functions): each line costs its
	// length plus a fixed 128 bytes (what a line costs the host's log
	// beside its text), so that empty lines are not free. Later lines are
	// dropped, with one warning. -1 disables logging. Default: 0, which
	// means 64 KiB.
	MaxLogBytes int
	// MaxLogLines bounds the lines one call may log; later lines are
	// dropped, with one warning. Default: 0, which means 256.
	MaxLogLines int
	// MaxSchemaSteps bounds the work of checking one value (a tool's
	// input, a deliverable, the value a validator returns) against the
	// plugin's JSON Schema. A schema can make that work exponential in the
	// value's depth ($ref recursion through anyOf branches) and the
	// checker cannot be interrupted, so the work is estimated first, in
	// time and memory proportional to this bound, and a value past it is
	// refused unchecked as too complex. A step costs the checker about
	// 0.2–0.7 µs and 100–350 bytes here. Default: 0, which means 200,000
	// (a JSON object of 100,000 members against a simple schema).
	MaxSchemaSteps int64
	// MaxErrorBytes bounds every text a plugin returns beside its output:
	// its error message (Extism's error_set, or an {"error": …} answer),
	// a policy's reason and summary, a validator's problems, and the cause
	// of every *PluginError of its load and calls (a trap quoting its
	// stderr, the problems of its description). Longer text is cut, saying
	// how many bytes were dropped, so that no plugin puts more than this
	// into a ledger or a model request through its errors. Default: 0,
	// which means 4 KiB.
	MaxErrorBytes int

	// TenantInstances bounds the live instances of all the tenant's
	// modules together. A call that needs a new instance beyond it first
	// closes an idle instance of another of the tenant's modules, and
	// otherwise waits for one within its deadline. The caps named Tenant…
	// bound the tenant's modules together; those of its module loaded last
	// apply. Default: 0, which means 16.
	TenantInstances int
	// TenantMemoryBytes bounds the memory the tenant's live instances
	// may grow to together: each counts what it may hold, whether it uses
	// it yet or not: its linear memory and Extism's kernel's, MemoryPages
	// each, and its tables (MaxTableElements, 8 bytes each). Default: 0,
	// which means 1,040 MiB (16 instances at the default limits: 32 MiB,
	// 32 MiB and 1 MiB).
	TenantMemoryBytes int64
	// TenantConcurrentCalls bounds the calls running at once across the
	// tenant's modules; more wait within their deadline, then fail unrun
	// (retryable). Default: 0, which means 8.
	TenantConcurrentCalls int
	// TenantTools bounds the tools the tenant's modules offer together
	// (every model pass sends them all); a module whose load would pass it
	// is refused. Default: 0, which means 64.
	TenantTools int
	// TenantDescriptionBytes bounds the bytes of the names, descriptions
	// and input schemas of the tools the tenant's modules offer together:
	// what every model pass sends. A module whose load would pass it is
	// refused. Default: 0, which means 64 KiB.
	TenantDescriptionBytes int

	// KV enables the tenant's key-value store (kv_get, kv_set,
	// kv_delete). Default: false, denied.
	KV bool
	// MaxKVKeyBytes bounds a key. Default: 0, which means 256.
	MaxKVKeyBytes int
	// MaxKVValueBytes bounds a value. Default: 0, which means 64 KiB.
	MaxKVValueBytes int
	// MaxKVKeys bounds the keys a tenant keeps: a kv_set of a new key
	// beyond it is refused (overwrites and deletes still work), so that a
	// plugin cannot fill the host's storage. Concurrent calls may
	// overshoot it by the number of calls in flight. Default: 0, which
	// means 1024.
	MaxKVKeys int

	// AllowedHosts are the hosts the http_request host function may reach:
	// "example.com" (its scheme's default port: 80 for http, 443 for
	// https), "example.com:8443" (that port), or
	// "*.example.com" (any subdomain, not example.com itself). Only http
	// and https; every redirect is checked again. Extism's own
	// allowed_hosts is never used (Manifest.AllowedHosts stays empty, so
	// its built-in HTTP is denied). Default: none, HTTP denied.
	AllowedHosts []string
	// AllowPrivateNetwork lets HTTP reach loopback, private, link-local
	// and other non-public addresses. The address is checked when the
	// connection is made, after DNS, so a name cannot rebind to a private
	// address. Default: false, refused.
	AllowPrivateNetwork bool
	// MaxHTTPRequests bounds the requests of one call (redirects
	// included). Default: 0, which means 8.
	MaxHTTPRequests int
	// MaxHTTPResponseBytes bounds a response body. Manifest:
	// Memory.MaxHttpResponseBytes. Default: 0, which means 1 MiB.
	MaxHTTPResponseBytes int64
	// HTTPTimeout bounds one request, redirects included; the call's own
	// deadline applies too. Default: 0, which means 10s.
	HTTPTimeout time.Duration
	// MaxRedirects is how many redirects a request follows, each checked
	// against AllowedHosts and the address rules. Default: 0, redirects
	// are not followed (the plugin gets the 3xx response).
	MaxRedirects int
	// Secrets are credentials the host adds to the plugin's requests to
	// their hosts (see [EgressSecret]); the plugin never reads them.
	// Default: none.
	Secrets []EgressSecret
}

// tableElementBytes is what an element of a table takes of the host's
// memory (wazero keeps a reference, a pointer, per element).
const tableElementBytes = 8

// The defaults of Limits' zero fields.
const (
	DefaultMemoryPages            = 512
	DefaultMaxModuleBytes         = 64 << 20
	DefaultCompileTimeout         = 10 * time.Second
	DefaultMaxCompileBytes        = 1 << 30
	DefaultCallTimeout            = 5 * time.Second
	DefaultFuel                   = 10_000_000_000
	DefaultMaxTableElements       = 1 << 17
	DefaultInstances              = 4
	DefaultMaxInputBytes          = 1 << 20
	DefaultMaxOutputBytes         = 1 << 20
	DefaultMaxVarBytes            = 1 << 20
	DefaultMaxLogBytes            = 64 << 10
	DefaultMaxLogLines            = 256
	DefaultMaxErrorBytes          = 4 << 10
	DefaultMaxSchemaSteps         = 200_000
	DefaultTenantInstances        = 16
	DefaultTenantMemoryBytes      = DefaultTenantInstances * (2*DefaultMemoryPages<<16 + DefaultMaxTableElements*tableElementBytes)
	DefaultTenantConcurrentCalls  = 8
	DefaultTenantTools            = 64
	DefaultTenantDescriptionBytes = 64 << 10
	DefaultMaxKVKeyBytes          = 256
	DefaultMaxKVValueBytes        = 64 << 10
	DefaultMaxKVKeys              = 1024
	DefaultMaxHTTPRequests        = 8
	DefaultMaxHTTPResponseBytes   = 1 << 20
	DefaultHTTPTimeout            = 10 * time.Second
)

// Validate returns nil when l is usable, or every problem of it (each
// wrapping ErrInvalidLimits). A Runtime refuses to load a module under
// limits that fail it.
func (l Limits) Validate() error {
	_, err := l.normalize()
	return err
}

// normalize returns l with defaults filled in, or all its problems joined.
func (l Limits) normalize() (Limits, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidLimits, fmt.Sprintf(format, args...)))
	}
	if l.MemoryPages == 0 {
		l.MemoryPages = DefaultMemoryPages
	} else if l.MemoryPages > 65536 {
		bad("MemoryPages %d is above 65536 (4 GiB)", l.MemoryPages)
	}
	switch {
	case l.Fuel == 0:
		l.Fuel = DefaultFuel
	case l.Fuel < 0:
		bad("Fuel %d is negative", l.Fuel)
	}
	if l.MaxTableElements == 0 {
		l.MaxTableElements = DefaultMaxTableElements
	}
	switch {
	case l.CallTimeout == 0:
		l.CallTimeout = DefaultCallTimeout
	case l.CallTimeout < time.Millisecond:
		bad("CallTimeout %s is below 1ms", l.CallTimeout)
	}
	defInt := func(name string, v *int, def int) {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			bad("%s %d is negative", name, *v)
		}
	}
	defInt("MaxModuleBytes", &l.MaxModuleBytes, DefaultMaxModuleBytes)
	switch {
	case l.CompileTimeout == 0:
		l.CompileTimeout = DefaultCompileTimeout * raceSlowdown
	case l.CompileTimeout < time.Millisecond:
		bad("CompileTimeout %s is below 1ms", l.CompileTimeout)
	}
	switch {
	case l.MaxCompileBytes == 0:
		l.MaxCompileBytes = DefaultMaxCompileBytes
	case l.MaxCompileBytes < 0:
		bad("MaxCompileBytes %d is negative", l.MaxCompileBytes)
	}
	defInt("Instances", &l.Instances, DefaultInstances)
	switch {
	case l.WarmInstances < 0:
		bad("WarmInstances %d is negative", l.WarmInstances)
	case l.WarmInstances > l.Instances:
		bad("WarmInstances %d is more than Instances %d", l.WarmInstances, l.Instances)
	}
	defInt("MaxInputBytes", &l.MaxInputBytes, DefaultMaxInputBytes)
	defInt("MaxOutputBytes", &l.MaxOutputBytes, DefaultMaxOutputBytes)
	defInt("MaxLogLines", &l.MaxLogLines, DefaultMaxLogLines)
	defInt("MaxErrorBytes", &l.MaxErrorBytes, DefaultMaxErrorBytes)
	defInt("TenantInstances", &l.TenantInstances, DefaultTenantInstances)
	defInt("TenantConcurrentCalls", &l.TenantConcurrentCalls, DefaultTenantConcurrentCalls)
	defInt("TenantTools", &l.TenantTools, DefaultTenantTools)
	defInt("TenantDescriptionBytes", &l.TenantDescriptionBytes, DefaultTenantDescriptionBytes)
	switch {
	case l.TenantMemoryBytes == 0:
		l.TenantMemoryBytes = DefaultTenantMemoryBytes
	case l.TenantMemoryBytes < 0:
		bad("TenantMemoryBytes %d is negative", l.TenantMemoryBytes)
	}
	defInt("MaxKVKeyBytes", &l.MaxKVKeyBytes, DefaultMaxKVKeyBytes)
	defInt("MaxKVValueBytes", &l.MaxKVValueBytes, DefaultMaxKVValueBytes)
	defInt("MaxKVKeys", &l.MaxKVKeys, DefaultMaxKVKeys)
	defInt("MaxHTTPRequests", &l.MaxHTTPRequests, DefaultMaxHTTPRequests)
	switch {
	case l.MaxLogBytes == 0:
		l.MaxLogBytes = DefaultMaxLogBytes
	case l.MaxLogBytes < -1:
		bad("MaxLogBytes %d is below -1", l.MaxLogBytes)
	}
	switch {
	case l.MaxSchemaSteps == 0:
		l.MaxSchemaSteps = DefaultMaxSchemaSteps
	case l.MaxSchemaSteps < 0:
		bad("MaxSchemaSteps %d is negative", l.MaxSchemaSteps)
	}
	switch {
	case l.MaxVarBytes == 0:
		l.MaxVarBytes = DefaultMaxVarBytes
	case l.MaxVarBytes < -1:
		bad("MaxVarBytes %d is below -1", l.MaxVarBytes)
	}
	switch {
	case l.MaxHTTPResponseBytes == 0:
		l.MaxHTTPResponseBytes = DefaultMaxHTTPResponseBytes
	case l.MaxHTTPResponseBytes < 0:
		bad("MaxHTTPResponseBytes %d is negative", l.MaxHTTPResponseBytes)
	}
	switch {
	case l.HTTPTimeout == 0:
		l.HTTPTimeout = DefaultHTTPTimeout
	case l.HTTPTimeout < 0:
		bad("HTTPTimeout %s is negative", l.HTTPTimeout)
	}
	if l.MaxRedirects < 0 {
		bad("MaxRedirects %d is negative", l.MaxRedirects)
	}
	for _, h := range l.AllowedHosts {
		if _, err := parseHostRule(h); err != nil {
			bad("AllowedHosts: %v", err)
		}
	}
	l.AllowedHosts = append([]string(nil), l.AllowedHosts...)
	if err := checkSecrets(l.Secrets, l.AllowedHosts); err != nil {
		bad("Secrets: %v", err)
	}
	l.Secrets = append([]EgressSecret(nil), l.Secrets...)
	return l, errors.Join(errs...)
}

// Manifest returns the Extism manifest of a module run under l (defaults
// applied): memory pages, timeout, HTTP response and var caps. It never
// grants AllowedPaths or AllowedHosts: plugins get no filesystem, and HTTP
// only through the host's own http_request function, which enforces
// AllowedHosts with the checks Extism's built-in one lacks.
func (l Limits) Manifest(wasm []byte) extism.Manifest {
	n, _ := l.normalize()
	if n.MaxVarBytes < 0 {
		n.MaxVarBytes = 0 // Extism's "disabled"
	}
	return extism.Manifest{
		Wasm: []extism.Wasm{extism.WasmData{Data: wasm, Name: "main"}},
		Memory: &extism.ManifestMemory{
			MaxPages:             n.MemoryPages,
			MaxHttpResponseBytes: n.MaxHTTPResponseBytes,
			MaxVarBytes:          n.MaxVarBytes,
		},
		Timeout: uint64(n.CallTimeout.Milliseconds()),
	}
}

// hostRule is one parsed AllowedHosts entry.
type hostRule struct {
	host     string // lower case, without the "*." of a wildcard
	wildcard bool   // matches subdomains of host
	port     string // "": the scheme's default port (80 for http, 443 for https)
}

func parseHostRule(s string) (hostRule, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || strings.Contains(s, "/") {
		return hostRule{}, fmt.Errorf("%q is not a host", orig)
	}
	var r hostRule
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return hostRule{}, fmt.Errorf("%q has a bad port", orig)
		}
		s, r.port = h, p
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		r.wildcard = true
		s = rest
	}
	if s == "" || strings.ContainsAny(s, "*[] ") {
		return hostRule{}, fmt.Errorf("%q is not a host (wildcards only as a leading \"*.\")", orig)
	}
	r.host = s
	return r, nil
}

// defaultPorts are the ports a rule without one matches, by scheme.
var defaultPorts = map[string]string{"http": "80", "https": "443"}

// match reports whether r admits a request of scheme to host and port
// (as endpointOf reads them off a URL): a rule without a port admits the
// scheme's default port only.
func (r hostRule) match(scheme, host, port string) bool {
	if r.port == "" {
		if port != defaultPorts[scheme] {
			return false
		}
	} else if r.port != port {
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(host, "."+r.host)
	}
	return host == r.host
}
