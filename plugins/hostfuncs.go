package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"
)

// The host functions every plugin may import, in Extism's user namespace
// ("extism:host/user"). Arguments and results are offsets of Extism memory
// blocks, like Extism's own functions:
//
//	log(level i32, msg i64)              level 0 debug, 1 info, 2 warn, 3 error
//	kv_get(key i64) -> i64               a block: status byte (0 missing, 1 found, 2 error) + value or message
//	kv_set(key i64, value i64) -> i64    0, or a block with an error message
//	kv_delete(key i64) -> i64            0, or a block with an error message
//	http_request(req i64) -> i64         a block with the JSON answer
//	idempotency_key() -> i64             a block with the Idempotency-Key the next http_request carries
//	wait_event(key i64) -> i64           a block: status byte (0 the event's payload follows, 2 error) + payload or message
//	wait_for(ms i64) -> i64              0, or a block with an error message
//
// The waits end a durable call while they wait (journal.go): the guest
// sees them return once the event or the time has come, in a replay.
//
// Error messages of refusals start with "denied:". The functions act for
// the call in progress: they find it in the context (callEnv); outside a
// call (which cannot happen through Extism) they deny everything.

// envKey is the context key of the call in progress.
type envKey struct{}

// callEnv is what host functions know of the call in progress.
type callEnv struct {
	mod          *Module
	export       string
	name         string
	callID       string
	logBytes     int // charged so far, overhead included
	logLines     int
	logDropped   bool
	httpRequests int
	tank         *tank     // the call's fuel
	fuelUsed     int64     // by the call's attempts so far
	yielded      time.Time // when the guest last yielded to the other goroutines (or started)
	// record keeps the call's traffic (a tool's call): its HTTP requests
	// and key-value accesses, in traffic, made at the first (traffic.go).
	record  bool
	traffic *trafficLog
	// replay answers the call's HTTP requests and key-value accesses
	// from a record instead (ReplayCall, replay.go).
	replay *replayer
	// journal journals a tool's call's host calls, and answers them
	// while the call replays (journal.go); nil when the call keeps none.
	journal *journal
	// pos is the place of the next host call in the call's journal (an
	// HTTP request takes two), kept whether the call journals or not: an
	// HTTP request's idempotency key is derived from keyBase and it.
	pos     int
	keyBase []byte
	// idemKey is the idempotency key of the request being sent.
	idemKey string
}

func envFrom(ctx context.Context) *callEnv {
	env, _ := ctx.Value(envKey{}).(*callEnv)
	return env
}

const (
	kvMissing = 0
	kvFound   = 1
	kvError   = 2
)

func hostFunctions() []extism.HostFunction {
	i32, i64 := extism.ValueTypeI32, extism.ValueTypeI64
	return []extism.HostFunction{
		extism.NewHostFunctionWithStack("log", hostLog, []extism.ValueType{i32, i64}, nil),
		extism.NewHostFunctionWithStack("kv_get", hostKVGet, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("kv_set", hostKVSet, []extism.ValueType{i64, i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("kv_delete", hostKVDelete, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("http_request", hostHTTP, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("idempotency_key", hostIdempotencyKey, nil, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("wait_event", hostWaitEvent, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("wait_for", hostWaitFor, []extism.ValueType{i64}, []extism.ValueType{i64}),
		checkFunction(),
	}
}

// userFunctions are the names of the host functions above, which a plugin
// may import from extism:host/user (importRule).
var userFunctions = map[string]bool{"log": true, "kv_get": true, "kv_set": true, "kv_delete": true, "http_request": true,
	"idempotency_key": true, "wait_event": true, "wait_for": true}

const userFunctionList = "log, kv_get, kv_set, kv_delete, http_request, idempotency_key, wait_event and wait_for"

// chargeHost charges the call in ctx n units of a host function's work (a
// walk of the kernel's blocks, bytes read or written), and stops it at its
// deadline or when its fuel cannot pay: the host's functions are metered
// by what they do, as the guest's instructions are.
func chargeHost(ctx context.Context, n int64) {
	if err := ctx.Err(); err != nil {
		panic(err)
	}
	env := envFrom(ctx)
	if env == nil || env.tank == nil || n <= 0 {
		return
	}
	if !env.tank.charge(n) {
		panic(errOutOfFuel)
	}
}

// kernelWalk is what a walk of the kernel's blocks costs now (see
// gateCost).
func kernelWalk(ctx context.Context) int64 {
	kernel, _ := ctx.Value(extism.PluginCtxKey("extism")).(api.Module)
	if kernel == nil {
		return 0
	}
	mem := kernelMemory(kernel)
	if mem == nil {
		return 0
	}
	return int64(mem.Size()) / kernelBlockBytes
}

// read returns the block at off, refusing blocks longer than max. It
// charges the call the kernel's walk to find the block and its bytes.
func read(ctx context.Context, p *extism.CurrentPlugin, off uint64, max int) ([]byte, error) {
	if off == 0 {
		return nil, nil
	}
	chargeHost(ctx, kernelWalk(ctx))
	b, err := readBlock(ctx, p, off, max)
	chargeHost(ctx, int64(len(b))>>4)
	return b, err
}

func readBlock(ctx context.Context, p *extism.CurrentPlugin, off uint64, max int) ([]byte, error) {
	if k := kernelOf(ctx); k != nil {
		return k.readBlock(ctx, off, max)
	}
	n, err := p.Length(off)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("argument of %d bytes exceeds %d", n, max)
	}
	return p.ReadBytes(off)
}

// write copies b into a new block and returns its offset. A failure (the
// plugin's memory is exhausted) traps the call.
func write(ctx context.Context, p *extism.CurrentPlugin, fn string, b []byte) uint64 {
	chargeHost(ctx, kernelWalk(ctx)+int64(len(b))>>4)
	var off uint64
	var err error
	if k := kernelOf(ctx); k != nil {
		off, err = k.writeBlock(ctx, b)
	} else {
		off, err = p.WriteBytes(b)
	}
	if err != nil {
		panic(fmt.Sprintf("host function %s: writing the answer: %v", fn, err))
	}
	return off
}

var slogLevels = map[int32]slog.Level{0: slog.LevelDebug, 1: slog.LevelInfo, 2: slog.LevelWarn, 3: slog.LevelError}

// logLineCost is what a log line costs beyond its text: the time, level
// and attributes the host's log adds. Charging it keeps empty lines from
// being free.
const logLineCost = 128

// allowLog charges a line of n bytes to the call's log budget and reports
// whether it may be written. The first line refused logs one warning.
func (env *callEnv) allowLog(n int) bool {
	l := env.mod.limits
	if l.MaxLogBytes < 0 {
		return false
	}
	env.logBytes += n + logLineCost
	env.logLines++
	if env.logBytes <= l.MaxLogBytes && env.logLines <= l.MaxLogLines {
		return true
	}
	if !env.logDropped {
		env.logDropped = true
		env.mod.log.Warn("plugin log budget of the call exhausted; dropping its further lines",
			"export", env.export, "name", env.name, "max_bytes", l.MaxLogBytes, "max_lines", l.MaxLogLines)
	}
	return false
}

// logAttrs are the attributes of a plugin's log line.
func (env *callEnv) logAttrs() []any {
	attrs := []any{"export", env.export}
	if env.name != "" {
		attrs = append(attrs, "name", env.name)
	}
	if env.callID != "" {
		attrs = append(attrs, "call_id", env.callID)
	}
	return attrs
}

func hostLog(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env == nil || env.mod.limits.MaxLogBytes < 0 {
		return
	}
	level := int32(uint32(stack[0]))
	msg, err := read(ctx, p, stack[1], env.mod.limits.MaxLogBytes)
	if err != nil {
		msg = []byte("(log line dropped: " + err.Error() + ")")
	}
	if env.journal != nil && !env.journalLog() {
		return // logged by the attempt that journaled it
	}
	if !env.allowLog(len(msg)) {
		return
	}
	if !utf8.Valid(msg) {
		msg = []byte(fmt.Sprintf("%q", msg))
	}
	lv, ok := slogLevels[level]
	if !ok {
		lv = slog.LevelInfo
	}
	// (A plugin with secrets logs none: secrets.go.)
	env.mod.log.Log(ctx, lv, env.mod.guard.withhold(string(msg)), env.logAttrs()...)
}

// kvKey checks that the call may use the key-value store and reads the key
// at offset; denied says why not.
func kvKey(ctx context.Context, env *callEnv, p *extism.CurrentPlugin, offset uint64) (key []byte, denied string) {
	if d := kvDenied(env); d != "" {
		if env != nil && env.record {
			// The record names the key refused, as a replay reads it.
			key, _ = read(ctx, p, offset, env.mod.limits.MaxKVKeyBytes)
		}
		return key, d
	}
	key, err := read(ctx, p, offset, env.mod.limits.MaxKVKeyBytes)
	if err != nil || len(key) == 0 {
		return nil, fmt.Sprintf("denied: bad key: %v", errOr(err, "empty"))
	}
	return key, ""
}

func kvDenied(env *callEnv) string {
	if env == nil {
		return "denied: no call in progress"
	}
	if !env.mod.limits.KV || env.mod.rt.kv == nil {
		return "denied: the key-value store is not enabled for this plugin"
	}
	return ""
}

func hostKVGet(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env != nil && env.replay != nil {
		env.replay.kvGet(ctx, env, p, stack)
		return
	}
	key, denied := kvKey(ctx, env, p, stack[0])
	get := func() []byte {
		found, value, msg := kvGet(ctx, env, key, denied)
		if env != nil && env.record {
			env.noteKV(ledger.KVGet, key, found, value, msg)
		}
		return kvGetAnswer(found, value, msg)
	}
	var answer []byte
	if env != nil && env.journal != nil {
		answer = env.journalKV(ctx, ledger.JournalKVGet, key, nil, get)
	} else {
		answer = get()
	}
	stack[0] = write(ctx, p, "kv_get", answer)
}

// kvGet is kv_get of key (which kvKey read, or denied): whether it was
// found and its value, or the message of a failure.
func kvGet(ctx context.Context, env *callEnv, key []byte, denied string) (found bool, value []byte, msg string) {
	if denied != "" {
		return false, nil, denied
	}
	v, ok, err := env.mod.rt.kv.Get(ctx, kvNamespace(env.mod.tenant), string(key))
	if err != nil {
		return false, nil, kvFailure(ctx, env, "kv_get", err)
	}
	return ok, v, ""
}

// kvGetAnswer is kv_get's answer: a status byte, then the value or the
// message.
func kvGetAnswer(found bool, value []byte, msg string) []byte {
	switch {
	case msg != "":
		return append([]byte{kvError}, msg...)
	case !found:
		return []byte{kvMissing}
	}
	return append([]byte{kvFound}, value...)
}

func hostKVSet(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env != nil && env.replay != nil {
		env.replay.kvWrite(ctx, env, p, ledger.KVSet, stack)
		return
	}
	key, value, msg := kvSetArgs(ctx, env, p, stack[0], stack[1])
	set := func() []byte {
		if msg == "" {
			msg = kvSet(ctx, env, key, value)
		}
		if env != nil && env.record {
			env.noteKV(ledger.KVSet, key, false, value, msg)
		}
		return []byte(msg)
	}
	var answer []byte
	if env != nil && env.journal != nil {
		answer = env.journalKV(ctx, ledger.JournalKVSet, key, value, set)
	} else {
		answer = set()
	}
	stack[0] = kvWriteAnswer(ctx, p, "kv_set", string(answer))
}

// kvSetArgs reads kv_set's key and value at their offsets, or the
// message of their refusal.
func kvSetArgs(ctx context.Context, env *callEnv, p *extism.CurrentPlugin, keyOff, valueOff uint64) (key, value []byte, msg string) {
	key, denied := kvKey(ctx, env, p, keyOff)
	if denied != "" {
		return key, nil, denied
	}
	value, err := read(ctx, p, valueOff, env.mod.limits.MaxKVValueBytes)
	if err != nil {
		return key, nil, "denied: bad value: " + err.Error()
	}
	return key, value, ""
}

// kvSet is kv_set of key and value (read by kvSetArgs): the message of a
// failure, or "".
func kvSet(ctx context.Context, env *callEnv, key, value []byte) string {
	if refused := kvQuota(ctx, env, string(key)); refused != "" {
		return refused
	}
	if err := env.mod.rt.kv.Set(ctx, kvNamespace(env.mod.tenant), string(key), value); err != nil {
		return kvFailure(ctx, env, "kv_set", err)
	}
	return ""
}

// kvWriteAnswer is kv_set's and kv_delete's answer: 0, or a block with
// the message.
func kvWriteAnswer(ctx context.Context, p *extism.CurrentPlugin, fn, msg string) uint64 {
	if msg == "" {
		return 0
	}
	return write(ctx, p, fn, []byte(msg))
}

func hostKVDelete(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env != nil && env.replay != nil {
		env.replay.kvWrite(ctx, env, p, ledger.KVDelete, stack)
		return
	}
	key, denied := kvKey(ctx, env, p, stack[0])
	del := func() []byte {
		msg := denied
		if denied == "" {
			if err := env.mod.rt.kv.Delete(ctx, kvNamespace(env.mod.tenant), string(key)); err != nil {
				msg = kvFailure(ctx, env, "kv_delete", err)
			}
		}
		if env != nil && env.record {
			env.noteKV(ledger.KVDelete, key, false, nil, msg)
		}
		return []byte(msg)
	}
	var answer []byte
	if env != nil && env.journal != nil {
		answer = env.journalKV(ctx, ledger.JournalKVDelete, key, nil, del)
	} else {
		answer = del()
	}
	stack[0] = kvWriteAnswer(ctx, p, "kv_delete", string(answer))
}

// kvQuota returns why a Set that would add a key beyond the tenant's
// Limits.MaxKVKeys is refused, "" when it may go on. The count is read
// before the Set, so concurrent calls may overshoot by the number in
// flight.
func kvQuota(ctx context.Context, env *callEnv, key string) string {
	kv, max := env.mod.rt.kv, env.mod.limits.MaxKVKeys
	n, err := kv.Len(ctx, kvNamespace(env.mod.tenant))
	if err != nil {
		return kvFailure(ctx, env, "kv_set", err)
	}
	if n < max {
		return ""
	}
	switch _, exists, err := kv.Get(ctx, kvNamespace(env.mod.tenant), key); {
	case err != nil:
		return kvFailure(ctx, env, "kv_set", err)
	case exists:
		return "" // an overwrite adds no key
	}
	return fmt.Sprintf("denied: the tenant's key-value store is full (%d keys, the limit is %d): delete keys first", n, max)
}

// kvFailure returns what a plugin is told of a key-value store error. A
// key or value out of the store's bounds is the plugin's to fix and is
// said; anything else (a dead Redis, a full disk) is the operator's: it is
// logged, and the plugin learns only that the store is unavailable, not
// the host's addresses or paths.
func kvFailure(ctx context.Context, env *callEnv, fn string, err error) string {
	switch {
	case errors.Is(err, storage.ErrInvalidKey), errors.Is(err, storage.ErrValueTooLarge):
		return "denied: " + err.Error()
	case ctx.Err() != nil:
		return "the call was interrupted"
	}
	env.mod.log.Warn("plugin key-value store failed", "function", fn, "export", env.export, "name", env.name, "err", err)
	return "the key-value store is unavailable (the host logged why)"
}

// maxHTTPRequestBytes bounds the JSON of one http_request (body included).
const maxHTTPRequestBytes = 8 << 20

func hostHTTP(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env == nil {
		stack[0] = write(ctx, p, "http_request", wireError(denied("no call in progress")))
		return
	}
	raw, err := read(ctx, p, stack[0], maxHTTPRequestBytes)
	if env.replay != nil {
		// A request that cannot be read is recorded as one of method "?"
		// with its error; raw is nil then, and it replays as such.
		stack[0] = write(ctx, p, "http_request", env.replay.http(env, raw))
		return
	}
	if env.journal != nil {
		stack[0] = write(ctx, p, "http_request", env.journalHTTP(ctx, raw, err))
		return
	}
	env.idemKey = idempotencyKey(env.keyBase, env.pos)
	env.pos += 2
	stack[0] = write(ctx, p, "http_request", env.httpLive(ctx, raw, err))
	env.idemKey = ""
}

// httpLive sends one http_request (raw, or the error that kept it from
// being read) and returns its answer.
func (env *callEnv) httpLive(ctx context.Context, raw []byte, readErr error) []byte {
	if readErr != nil {
		err := denied("bad request: %v", readErr)
		if env.record {
			env.noteHTTP(httpRequestOf{method: "?"}, nil, nil, err, 0)
		}
		return wireError(err)
	}
	return env.mod.guard.do(ctx, env, raw)
}

// hostIdempotencyKey is idempotency_key: the key the call's next
// http_request will carry (journal.go).
func hostIdempotencyKey(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	if env == nil {
		stack[0] = write(ctx, p, "idempotency_key", nil)
		return
	}
	stack[0] = write(ctx, p, "idempotency_key", []byte(idempotencyKey(env.keyBase, env.pos)))
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// hostWaitEvent is wait_event: the payload of the event posted to the
// call's session under key. A durable call (one that keeps a journal)
// ends while it waits, and is replayed once the event is posted; any other
// call cannot wait, and gets an error.
func hostWaitEvent(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	fail := func(msg string) { stack[0] = write(ctx, p, "wait_event", append([]byte{kvError}, msg...)) }
	if env == nil {
		fail("denied: no call in progress")
		return
	}
	key, err := read(ctx, p, stack[0], host.MaxEventKeyBytes)
	switch {
	case err != nil:
		fail("denied: bad key: " + err.Error())
		return
	case !host.ValidEventKey(string(key)):
		fail(fmt.Sprintf("denied: bad key: an event key is 1 to %d bytes of UTF-8 without control characters", host.MaxEventKeyBytes))
		return
	case env.journal == nil:
		fail("denied: only a durable call waits for an event (a tool call of a run; not plugin call, MCP or a task that is not durable)")
		return
	}
	payload := env.journalWaitEvent(ctx, string(key))
	stack[0] = write(ctx, p, "wait_event", append([]byte{0}, payload...))
}

// maxWait bounds one wait_for.
const maxWait = 366 * 24 * time.Hour

// hostWaitFor is wait_for: it returns once ms milliseconds have passed. A
// durable call ends while it waits, and is replayed when the time comes;
// any other call waits in place, within its deadline.
func hostWaitFor(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
	env := envFrom(ctx)
	ms := int64(stack[0])
	switch {
	case env == nil:
		stack[0] = write(ctx, p, "wait_for", []byte("denied: no call in progress"))
		return
	case ms < 0 || ms > int64(maxWait/time.Millisecond):
		stack[0] = write(ctx, p, "wait_for", []byte(fmt.Sprintf("denied: bad duration %d ms: from 0 to %d", ms, int64(maxWait/time.Millisecond))))
		return
	}
	d := time.Duration(ms) * time.Millisecond
	if env.journal != nil {
		env.journalWaitFor(ctx, d)
		stack[0] = 0
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		stack[0] = 0
	case <-ctx.Done():
		panic(ctx.Err()) // the call's deadline: it ends as timed out
	}
}
