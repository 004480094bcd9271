package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// The journal of a tool's call (host.Journal): every host function the
// call makes — an HTTP request, a key-value access, a log line — is an
// entry, with the answer the guest got, in the order the guest made them.
// A Wasm guest is deterministic given the answers of its imports, and its
// only way out of the sandbox is the host's functions: a call that a
// crash interrupted is run again from the start on the same module with
// the journal answering each host call it had made, then goes on live.
//
// What must be durable, and when:
//
//   - An HTTP request is journaled (http-send, with its idempotency key)
//     before it leaves the host, and its answer (http) before the guest
//     gets it. A send without its answer is the one effect that may or may
//     not have happened: a replay sends it again with the same key, or,
//     for a tool that declares at_most_once, ends the call "outcome
//     unknown" naming the request.
//   - A key-value write is journaled, after it is done, before the guest
//     goes on: one the crash cut before its entry is done again (a set or
//     a delete of the same key to the same value).
//   - A key-value read, and what the guest read of its clocks and random
//     numbers (sysclock.go), are journaled with the next entry that must
//     be durable: nobody outside the sandbox saw their answers before
//     then, so a crash before it runs them live again, which nobody can
//     tell from the first time.
//   - A log line is not journaled (it has no answer to replay): a replay
//     does not log the lines of the host calls it answers from the
//     journal.
//
// A replayed guest that asks anything other than what the journal holds
// at that place has diverged: the call fails (ErrJournalDiverged), never
// silently live. A journal is bounded (MaxJournalEntries,
// MaxJournalBytes): a call past a bound fails (ErrJournalFull).

// The bounds of a call's journal.
const (
	// MaxJournalEntries bounds the host calls one call's journal keeps
	// (an HTTP request takes two: its send and its answer).
	MaxJournalEntries = 4096
	// MaxJournalBytes bounds what one call's journal keeps: answers,
	// digests and names together.
	MaxJournalBytes = 16 << 20
	// maxJournalPending is what reads and logs may hold before they are
	// written without waiting for a write to go with.
	maxJournalPending = 1 << 20
	// maxJournalWhat bounds the name of a host call (a method and URL,
	// a key) in an entry.
	maxJournalWhat = 256
)

var (
	// ErrJournalDiverged: a replayed call asked its host functions for
	// something other than what its journal recorded at that place.
	ErrJournalDiverged = errors.New("plugins: the replayed call diverged from its journal")
	// ErrJournalModule: a call's journal was made by another module (its
	// hash) than the one that would replay it: the plugin changed between
	// the crash and the resume. The call is not run.
	ErrJournalModule = errors.New("plugins: the call's journal was made by another module")
	// ErrJournalFull: the call's journal passed MaxJournalEntries or
	// MaxJournalBytes.
	ErrJournalFull = errors.New("plugins: the call's journal is full")
	// ErrJournalWrite: the journal could not be made durable (the
	// session's storage failed, the run lost its lease): the call stops,
	// as nothing it does after would be recorded.
	ErrJournalWrite = errors.New("plugins: the call's journal could not be written")
	// ErrOutcomeUnknown: a request of a tool that declares at_most_once
	// was in flight when its host stopped: it may or may not have reached
	// its server, and it is not sent again.
	ErrOutcomeUnknown = errors.New("plugins: outcome unknown")
)

// callAbort is what a host function panics with to end a call for its
// journal; the call fails with err (see invokeTraced).
type callAbort struct{ err error }

// journal is a call's journal in the making.
type journal struct {
	sink       host.Journal
	source     string                // the module's hash
	recorded   []ledger.JournalEntry // the host calls recorded (the clocks' and random streams apart: softQ)
	next       int                   // the recorded entry the next host call replays
	pending    []ledger.JournalEntry
	pendingN   int // bytes of pending
	entries    int // entries recorded or journaled
	bytes      int
	atMostOnce bool
	keyBase    []byte // tenant, session and call id, for idempotency keys
	replayed   int    // entries answered from the journal
	aborted    error  // why a host function ended the call
	// softQ holds, per stream (walltime, nanotime, random), the recorded
	// bytes a replay has not read yet (sysclock.go); monoLast and
	// monoShift keep the monotonic clock from going back.
	softQ               map[string][]byte
	monoLast, monoShift int64
	streamBytes         int // journaled of the streams (maxJournalStreams)
}

// newJournal returns the journal of call for module m's tool, or the
// error that refuses to replay it.
func newJournal(m *Module, call host.ToolCall, atMostOnce bool) (*journal, error) {
	source, recorded := call.Journal.Recorded()
	if source != "" && source != m.hash {
		calls := 0
		for _, e := range recorded {
			if !softOps[e.Op] {
				calls++
			}
		}
		return nil, detailed(ErrJournalModule, "the call was interrupted in %s and the module is %s now: the %d host calls it made are not replayed, so its outcome is unknown; check what it did before calling it again",
			source, m.hash, calls)
	}
	j := &journal{sink: call.Journal, source: m.hash, entries: len(recorded), atMostOnce: atMostOnce,
		keyBase: idempotencyBase(m.tenant, call.SessionID, call.ID), softQ: map[string][]byte{}}
	for i := range recorded {
		e := &recorded[i]
		j.bytes += entryBytes(e)
		if softOps[e.Op] {
			j.softQ[e.Op] = append(j.softQ[e.Op], e.Answer...)
			continue
		}
		j.recorded = append(j.recorded, *e)
	}
	return j, nil
}

// idempotencyBase is what a call's idempotency keys are derived from.
func idempotencyBase(tenant, session, callID string) []byte {
	b := make([]byte, 0, len(tenant)+len(session)+len(callID)+2)
	b = append(append(append(append(append(b, tenant...), 0), session...), 0), callID...)
	return b
}

// idempotencyKey is the key of the HTTP request at place pos of the call
// whose base is base: the same on every attempt of the call.
func idempotencyKey(base []byte, pos int) string {
	h := sha256.New()
	h.Write(base)
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], uint64(pos))
	h.Write(p[:])
	return "agentic-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// entryBytes is what an entry takes of the journal's bound.
func entryBytes(e *ledger.JournalEntry) int {
	return len(e.Op) + len(e.Request) + len(e.What) + len(e.Key) + len(e.Answer)
}

// replaying reports whether the next host call is answered from the
// journal.
func (j *journal) replaying() bool { return j.next < len(j.recorded) }

// replay returns the recorded answer of the host call op, asked with req
// (named what), at the journal's place; the call ends (a callAbort) when
// the journal recorded another call there.
func (j *journal) replay(op, what string, req []byte) ledger.JournalEntry {
	return j.replayDigest(op, what, digest(req))
}

// replayDigest is replay of a request known by its digest.
func (j *journal) replayDigest(op, what, reqDigest string) ledger.JournalEntry {
	at := j.next
	want := j.recorded[at]
	j.next++
	j.replayed++
	if want.Op != op || want.Request != reqDigest {
		j.abort(detailed(ErrJournalDiverged, "host call %d is %s %s, the journal recorded %s %s there",
			at+1, op, quoteWhat(what), want.Op, quoteWhat(want.What)))
	}
	return want
}

// record journals a live host call's entry; with durable, it returns once
// every entry so far is durable.
func (j *journal) record(ctx context.Context, e ledger.JournalEntry, durable bool) {
	n := entryBytes(&e)
	if j.entries+1 > MaxJournalEntries {
		j.abort(detailed(ErrJournalFull, "more than %d host calls in one call (MaxJournalEntries)", MaxJournalEntries))
	}
	if j.bytes+n > MaxJournalBytes {
		j.abort(detailed(ErrJournalFull, "its host calls' answers pass %d bytes (MaxJournalBytes)", MaxJournalBytes))
	}
	j.entries++
	j.bytes += n
	j.pending = append(j.pending, e)
	j.pendingN += n
	if durable || j.pendingN >= maxJournalPending {
		j.flush(ctx)
	}
}

// flush makes the pending entries durable.
func (j *journal) flush(ctx context.Context) {
	if len(j.pending) == 0 {
		return
	}
	if err := j.sink.Record(ctx, j.source, j.pending); err != nil {
		j.abort(detailed(ErrJournalWrite, "%v", err))
	}
	j.pending, j.pendingN = j.pending[:0], 0
}

// abort ends the call in progress with err: the host function panics,
// the runtime unwinds the guest, and the call fails with err
// (invokeTraced reads it here).
func (j *journal) abort(err error) {
	j.aborted = err
	panic(&callAbort{err: err})
}

// quoteWhat quotes an entry's name for a message.
func quoteWhat(what string) string {
	if what == "" {
		return ""
	}
	return strconv.Quote(what)
}

// whatOf names a host call's subject for an entry, cut.
func whatOf(s string) string { return text(s, maxJournalWhat) }

// httpWhat names an http_request by its method and URL.
func httpWhat(raw []byte) string {
	var w struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	}
	if json.Unmarshal(raw, &w) != nil {
		return "(malformed request)"
	}
	if w.Method == "" {
		w.Method = "GET"
	}
	return whatOf(w.Method + " " + w.URL)
}

// ownIdempotencyKey returns the Idempotency-Key a plugin's http_request
// sets itself (its header's name in any case; of several spellings, the
// last in sorted order, the one the request carries: see httpguard.go),
// or "".
func ownIdempotencyKey(raw []byte) string {
	var w struct {
		Headers map[string]string `json:"headers"`
	}
	if json.Unmarshal(raw, &w) != nil {
		return ""
	}
	own := ""
	for _, k := range slices.Sorted(maps.Keys(w.Headers)) {
		if http.CanonicalHeaderKey(k) == "Idempotency-Key" {
			own = w.Headers[k]
		}
	}
	return own
}

// journalHTTP runs one http_request of a journaled call: from the
// journal while it replays, live after.
func (env *callEnv) journalHTTP(ctx context.Context, raw []byte, readErr error) []byte {
	j := env.journal
	req := raw
	if readErr != nil {
		req = []byte("(unreadable: " + readErr.Error() + ")")
	}
	what := httpWhat(raw)
	pos := env.pos
	env.pos += 2
	if j.replaying() {
		sent := j.replay(ledger.JournalHTTPSend, what, req)
		if j.replaying() {
			return j.replay(ledger.JournalHTTP, what, req).Answer
		}
		// The one unknown: the request was journaled, and maybe sent,
		// when the host stopped.
		if j.atMostOnce {
			j.abort(detailed(ErrOutcomeUnknown, "the request %s (host call %d, idempotency key %s) was in flight when the host stopped: it may or may not have reached its server, and this tool declares at_most_once, so it was not sent again; check its effect before calling the tool again",
				quoteWhat(sent.What), pos+1, sent.Key))
		}
		env.idemKey = sent.Key
	} else {
		env.idemKey = idempotencyKey(j.keyBase, pos)
		if own := ownIdempotencyKey(raw); own != "" {
			env.idemKey = own // the plugin's own is what the server sees (httpguard.go)
		}
		j.record(ctx, ledger.JournalEntry{Op: ledger.JournalHTTPSend, Request: digest(req), What: what, Key: env.idemKey}, true)
	}
	answer := env.httpLive(ctx, raw, readErr)
	env.idemKey = ""
	j.record(ctx, ledger.JournalEntry{Op: ledger.JournalHTTP, Request: digest(req), Answer: answer}, true)
	return answer
}

// journalKV runs one key-value access of a journaled call (op, on key,
// with value for a set): from the journal while it replays (nothing is
// touched), else by do, whose answer is journaled.
func (env *callEnv) journalKV(ctx context.Context, op string, key, value []byte, do func() []byte) []byte {
	j := env.journal
	env.pos++
	// The key and the value, digested without a copy of the value.
	h := sha256.New()
	h.Write(key)
	h.Write([]byte{0})
	h.Write(value)
	req := "sha256:" + hex.EncodeToString(h.Sum(nil))
	what := whatOf(string(key))
	if j.replaying() {
		return j.replayDigest(op, what, req).Answer
	}
	answer := do()
	j.record(ctx, ledger.JournalEntry{Op: op, Request: req, What: what, Answer: answer}, op != ledger.JournalKVGet)
	return answer
}

// journalLog reports whether a log line of a journaled call is to be
// logged: not while the call replays (the attempt that got there logged
// it). Log lines are not journaled: they have no answer a replay needs,
// and a call may log past the journal's bounds (its lines past the log's
// budget are dropped anyway).
func (env *callEnv) journalLog() bool { return !env.journal.replaying() }

// journalWaitEvent is wait_event of a journaled call: the payload of the
// event key, when it was posted (recorded, or found and recorded now);
// else the call ends waiting for it (a *host.WaitError), its wait
// journaled.
func (env *callEnv) journalWaitEvent(ctx context.Context, key string) []byte {
	j := env.journal
	env.pos += 2
	req := []byte(key)
	if j.replaying() {
		j.replay(ledger.JournalWaitEvent, key, req)
		if j.replaying() {
			return j.replay(ledger.JournalWaitDone, key, req).Answer
		}
	} else {
		j.record(ctx, ledger.JournalEntry{Op: ledger.JournalWaitEvent, Request: digest(req), What: key, Key: key}, true)
	}
	payload, ok, err := j.sink.Event(ctx, key)
	if err != nil {
		j.abort(detailed(ErrJournalWrite, "reading the events posted: %v", err))
	}
	if !ok {
		j.abort(&host.WaitError{Event: key})
	}
	j.record(ctx, ledger.JournalEntry{Op: ledger.JournalWaitDone, Request: digest(req), What: key, Answer: payload}, true)
	return payload
}

// journalWaitFor is wait_for of a journaled call: it returns once the
// time it waits until (journaled the first time) has come; until then the
// call ends waiting (a *host.WaitError).
func (env *callEnv) journalWaitFor(ctx context.Context, d time.Duration) {
	j := env.journal
	env.pos += 2
	req := []byte(strconv.FormatInt(int64(d/time.Millisecond), 10))
	var until time.Time
	if j.replaying() {
		e := j.replay(ledger.JournalWaitTimer, "", req)
		if j.replaying() {
			j.replay(ledger.JournalWaitDone, "", req)
			return
		}
		until, _ = time.Parse(time.RFC3339Nano, e.Key)
	} else {
		until = time.Now().Add(d).UTC()
		j.record(ctx, ledger.JournalEntry{Op: ledger.JournalWaitTimer, Request: digest(req), What: "until " + until.Format(time.RFC3339),
			Key: until.Format(time.RFC3339Nano)}, true)
	}
	if time.Now().Before(until) {
		j.abort(&host.WaitError{Until: until})
	}
	j.record(ctx, ledger.JournalEntry{Op: ledger.JournalWaitDone, Request: digest(req)}, true)
}

// flushed is called when the guest returned: a call that replayed must
// have made every host call its journal holds. What is pending need not
// be written: the call's result follows.
func (j *journal) flushed() error {
	if !j.replaying() {
		return nil
	}
	want := j.recorded[j.next]
	j.aborted = detailed(ErrJournalDiverged, "the call ended after %d host calls; the journal recorded %d, the next %s %s",
		j.next, len(j.recorded), want.Op, quoteWhat(want.What))
	return j.aborted
}

// String describes the abort for a runtime that prints a panic's value.
func (a *callAbort) String() string { return fmt.Sprint(a.err) }
