package plugins

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	extism "github.com/extism/go-sdk"
)

// Replaying a recorded call: the module runs the call again, its host
// functions answering from the call's recorded traffic instead of the
// network and the key-value store. Each HTTP request must be the one
// recorded at its place (method, URL, the names of its headers, its
// body's digest) and gets the recorded answer; each key-value access must
// be the one recorded (operation, key, a written value's digest), a read
// gets the recorded value, and nothing is written. Whatever differs — a
// request or access not recorded, one recorded and not made, another
// body, another output — is a divergence, named precisely.

// ReplayVerdict is what a replay found.
type ReplayVerdict string

// The verdicts of a replay.
const (
	// ReplaySame: the module made the same requests and accesses, in the
	// same order, and gave the same result.
	ReplaySame ReplayVerdict = "same"
	// ReplayDiverged: it did not; Replay.Divergences say where.
	ReplayDiverged ReplayVerdict = "diverged"
	// ReplayNotReplayable: the record is not whole (Replay.Reason says
	// why), so the call was not run.
	ReplayNotReplayable ReplayVerdict = "not_replayable"
)

// maxDivergences bounds the divergences a replay reports; the first is
// where the module first behaved otherwise.
const maxDivergences = 20

// Replay is what [ReplayCall] found.
type Replay struct {
	// CallID and Tool name the call replayed.
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Verdict is same, diverged or not_replayable.
	Verdict ReplayVerdict `json:"verdict"`
	// Reason says why a call is not replayable.
	Reason string `json:"reason,omitempty"`
	// Divergences say where the replay differed from the record, in the
	// order found (at most 20).
	Divergences []string `json:"divergences,omitempty"`
	// Source is the module that replayed the call, RecordedSource the one
	// that served it.
	Source         string `json:"source,omitempty"`
	RecordedSource string `json:"recorded_source,omitempty"`
	// Output and IsError are the replay's result, as the host records a
	// result ("error: …" for a failed call).
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Fuel is what the replay used (a Go or AssemblyScript plugin's
	// varies with its heap: it is not compared).
	Fuel int64 `json:"fuel,omitempty"`
	// Traffic is what the replay did through the host functions, with
	// the answers it got.
	Traffic *ledger.ToolTraffic `json:"traffic,omitempty"`
}

// ReplayCall runs call again on module m, a tool call recorded with
// result recorded (its Traffic, Output and IsError), with no network and
// without touching the key-value store: the module's HTTP requests and
// key-value accesses are answered from the recorded traffic. It tells
// whether the module behaves the same. m may be the module that served the
// call or another version of it (to test a new version against recorded
// traffic); its configuration is its own (Source.Config). call.ID must be
// the recorded call's id, as the plugin saw it.
//
// A record that is not whole (truncated, a body or value not kept, or no
// record at all) is not replayable: the call is not run. The error is
// non-nil only for arguments that cannot be replayed at all.
func ReplayCall(ctx context.Context, m *Module, call host.ToolCall, recorded ledger.ToolResult) (Replay, error) {
	if m == nil {
		return Replay{}, errors.New("plugins: ReplayCall: no module")
	}
	if call.Name == "" {
		return Replay{}, errors.New("plugins: ReplayCall: the call names no tool")
	}
	if call.ID == "" {
		return Replay{}, errors.New("plugins: ReplayCall: the call has no id")
	}
	rp := Replay{CallID: call.ID, Tool: call.Name, Source: m.hash, RecordedSource: recorded.Source}
	if ok, why := recorded.Traffic.Replayable(); !ok {
		rp.Verdict, rp.Reason = ReplayNotReplayable, why
		return rp, nil
	}
	if recorded.Synthetic {
		rp.Verdict, rp.Reason = ReplayNotReplayable, "the host made this result up: the tool did not run"
		return rp, nil
	}
	t, ok := m.tools[call.Name]
	if !ok {
		rp.Verdict = ReplayDiverged
		rp.Divergences = []string{fmt.Sprintf("the module offers no tool %q", call.Name)}
		return rp, nil
	}
	r := &replayer{rec: recorded.Traffic}
	res, err := t.call(ctx, call, r)
	r.finish()
	rp.Fuel, rp.Traffic = res.Fuel, res.Traffic
	if err != nil {
		rp.Output, rp.IsError = "error: "+strings.ToValidUTF8(err.Error(), "\uFFFD"), true
	} else {
		rp.Output = strings.ToValidUTF8(res.Output, "\uFFFD")
	}
	if rp.IsError != recorded.IsError || !sameOutput(rp.Output, recorded.Output) {
		r.diverge("the result differs: %s, recorded %s", describeResult(rp.Output, rp.IsError), describeResult(recorded.Output, recorded.IsError))
	}
	rp.Divergences = r.diverged
	rp.Verdict = ReplaySame
	if len(r.diverged) > 0 {
		rp.Verdict = ReplayDiverged
	}
	return rp, nil
}

// truncatedTail is the marker ledger.CapToolOutput ends a cut output with.
var truncatedTail = regexp.MustCompile(`\n\[truncated (\d+) bytes\]$`)

// sameOutput reports whether a replay's output is the recorded one, which
// the host may have cut (ledger.CapToolOutput).
func sameOutput(replayed, recorded string) bool {
	if replayed == recorded {
		return true
	}
	m := truncatedTail.FindStringSubmatchIndex(recorded)
	if m == nil {
		return false
	}
	kept := recorded[:m[0]]
	cut, err := strconv.Atoi(recorded[m[2]:m[3]])
	return err == nil && len(replayed) == len(kept)+cut && strings.HasPrefix(replayed, kept)
}

// describeResult quotes a result for a divergence, cut.
func describeResult(output string, isError bool) string {
	what := "output"
	if isError {
		what = "error"
	}
	return fmt.Sprintf("%s %s", what, strconv.Quote(text(output, 200)))
}

// replayer answers a call's host functions from a record.
type replayer struct {
	rec              *ledger.ToolTraffic
	nextHTTP, nextKV int // the next recorded request and access
	seq              int // the place of the next access
	diverged         []string
}

func (r *replayer) diverge(format string, args ...any) {
	if len(r.diverged) < maxDivergences {
		r.diverged = append(r.diverged, fmt.Sprintf(format, args...))
	} else if len(r.diverged) == maxDivergences {
		r.diverged = append(r.diverged, "(more divergences not listed)")
	}
}

// finish reports what the record holds and the replay did not do.
func (r *replayer) finish() {
	if n := len(r.rec.HTTP); r.nextHTTP < n {
		x := r.rec.HTTP[r.nextHTTP]
		r.diverge("the replay made %d HTTP requests, the call recorded %d: request %d (%s %s) was not made", r.nextHTTP, n, r.nextHTTP+1, x.Method, x.URL)
	}
	if n := len(r.rec.KV); r.nextKV < n {
		a := r.rec.KV[r.nextKV]
		r.diverge("the replay made %d key-value accesses, the call recorded %d: access %d (%s %q) was not made", r.nextKV, n, r.nextKV+1, a.Op, a.KeyText())
	}
}

// errNotRecorded is what a plugin is answered when its request or access
// is not the one recorded: the replay cannot answer it.
const errNotRecorded = "replay: this is not what the call recorded here, so there is no answer to give"

// http answers one http_request from the record.
func (r *replayer) http(env *callEnv, raw []byte) []byte {
	seq := r.seq
	r.seq++
	req := httpRequestOf{method: "?"}
	var w httpWireRequest
	if json.Unmarshal(raw, &w) == nil {
		req = requestOf(&w)
	}
	x := exchangeOf(req)
	n := r.nextHTTP
	r.nextHTTP++
	answer := func(res *httpWireResponse, data []byte, err error) []byte {
		if env.record {
			env.noteHTTP(req, res, data, err, 0)
		}
		if err != nil {
			return wireError(err)
		}
		b, _ := json.Marshal(res)
		return b
	}
	if n >= len(r.rec.HTTP) {
		r.diverge("HTTP request %d (%s %s) is not in the record: the call made %d", n+1, x.Method, x.URL, len(r.rec.HTTP))
		return answer(nil, nil, errors.New(errNotRecorded))
	}
	want := r.rec.HTTP[n]
	var diffs []string
	if x.Method != want.Method {
		diffs = append(diffs, fmt.Sprintf("method %s, recorded %s", x.Method, want.Method))
	}
	if x.URL != want.URL || x.URLDigest != want.URLDigest {
		diffs = append(diffs, fmt.Sprintf("URL %s, recorded %s", x.URL, want.URL))
	}
	if !slices.Equal(x.RequestHeaders, want.RequestHeaders) {
		diffs = append(diffs, fmt.Sprintf("headers %q, recorded %q", x.RequestHeaders, want.RequestHeaders))
	}
	if x.RequestDigest != want.RequestDigest {
		diffs = append(diffs, fmt.Sprintf("body %s, recorded %s", bodyOf(x.RequestBytes, x.RequestDigest), bodyOf(want.RequestBytes, want.RequestDigest)))
	}
	if seq != want.Seq {
		diffs = append(diffs, fmt.Sprintf("made at place %d of the call's traffic, recorded at %d", seq, want.Seq))
	}
	if len(diffs) > 0 {
		r.diverge("HTTP request %d (%s %s): %s", n+1, want.Method, want.URL, strings.Join(diffs, "; "))
		return answer(nil, nil, errors.New(errNotRecorded))
	}
	if want.Error != "" {
		err := error(errors.New(want.Error))
		if want.Denied {
			err = &deniedError{msg: want.Error}
		}
		return answer(nil, nil, err)
	}
	res := httpWireResponse{Status: want.Status, Headers: headersOf(want.ResponseHeaders)}
	data := want.ResponseBodyBase64
	if data != nil {
		res.BodyBase64 = base64.StdEncoding.EncodeToString(data)
	} else {
		s := want.ResponseBody
		res.Body, data = &s, []byte(s)
	}
	return answer(&res, data, nil)
}

// bodyOf describes a body by its size and digest.
func bodyOf(n int64, d string) string {
	if n == 0 {
		return "empty"
	}
	return fmt.Sprintf("of %d bytes (%s)", n, d)
}

// kvAccess checks one key-value access against the record and returns
// the recorded one, or nil when it is not the one recorded.
func (r *replayer) kvAccess(op string, key, value []byte, msg string) *ledger.KVAccess {
	seq := r.seq
	r.seq++
	n := r.nextKV
	r.nextKV++
	shown := strconv.Quote(string(key))
	if msg != "" {
		shown = "(" + msg + ")"
	}
	if n >= len(r.rec.KV) {
		r.diverge("key-value access %d (%s %s) is not in the record: the call made %d", n+1, op, shown, len(r.rec.KV))
		return nil
	}
	want := &r.rec.KV[n]
	var diffs []string
	wantKey := []byte(want.Key)
	if want.KeyBase64 != nil {
		wantKey = want.KeyBase64
	}
	if op != want.Op {
		diffs = append(diffs, fmt.Sprintf("%s, recorded %s", op, want.Op))
	}
	if string(key) != string(wantKey) {
		diffs = append(diffs, fmt.Sprintf("key %s, recorded %q", shown, want.KeyText()))
	}
	if op == ledger.KVSet && want.Op == ledger.KVSet && want.Error == "" && msg == "" && digest(value) != want.ValueDigest {
		diffs = append(diffs, fmt.Sprintf("value %s, recorded %s", bodyOf(int64(len(value)), digest(value)), bodyOf(want.ValueBytes, want.ValueDigest)))
	}
	if seq != want.Seq {
		diffs = append(diffs, fmt.Sprintf("made at place %d of the call's traffic, recorded at %d", seq, want.Seq))
	}
	if len(diffs) > 0 {
		r.diverge("key-value access %d (%s %q): %s", n+1, want.Op, want.KeyText(), strings.Join(diffs, "; "))
		return nil
	}
	return want
}

// replayKey reads a key as kv_get reads it, within the module's bound,
// without the sandbox's other checks (the record holds their answers).
func replayKey(ctx context.Context, env *callEnv, p *extism.CurrentPlugin, off uint64) (key []byte, msg string) {
	key, err := read(ctx, p, off, env.mod.limits.MaxKVKeyBytes)
	if err != nil || len(key) == 0 {
		return key, fmt.Sprintf("denied: bad key: %v", errOr(err, "empty"))
	}
	return key, ""
}

// kvGet answers one kv_get from the record.
func (r *replayer) kvGet(ctx context.Context, env *callEnv, p *extism.CurrentPlugin, stack []uint64) {
	key, msg := replayKey(ctx, env, p, stack[0])
	var found bool
	var value []byte
	switch want := r.kvAccess(ledger.KVGet, key, nil, msg); {
	case want == nil:
		msg = errNotRecorded
	case want.Error != "":
		msg = want.Error
	default:
		msg, found, value = "", want.Found, []byte(want.Value)
		if want.ValueBase64 != nil {
			value = want.ValueBase64
		}
	}
	if env.record {
		env.noteKV(ledger.KVGet, key, found, value, msg)
	}
	stack[0] = write(ctx, p, "kv_get", kvGetAnswer(found, value, msg))
}

// kvWrite answers one kv_set or kv_delete from the record, writing
// nothing.
func (r *replayer) kvWrite(ctx context.Context, env *callEnv, p *extism.CurrentPlugin, op string, stack []uint64) {
	key, msg := replayKey(ctx, env, p, stack[0])
	var value []byte
	if op == ledger.KVSet && msg == "" {
		v, err := read(ctx, p, stack[1], env.mod.limits.MaxKVValueBytes)
		if err != nil {
			msg = "denied: bad value: " + err.Error()
		}
		value = v
	}
	switch want := r.kvAccess(op, key, value, msg); {
	case want == nil:
		msg = errNotRecorded
	default:
		msg = want.Error
	}
	if env.record {
		env.noteKV(op, key, false, value, msg)
	}
	fn := "kv_set"
	if op == ledger.KVDelete {
		fn = "kv_delete"
	}
	stack[0] = kvWriteAnswer(ctx, p, fn, msg)
}
