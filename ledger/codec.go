package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SchemaVersion is the version of the event encoding that [Encode] writes
// and [Decode] reads. Decoding an event of any other version fails with
// [ErrVersion]: a ledger is never misread.
const SchemaVersion = 1

var (
	// ErrVersion is returned (wrapped in a *DecodeError) for an event whose
	// schema version this codec does not speak.
	ErrVersion = errors.New("ledger: unsupported schema version")
	// ErrInvalid is returned (wrapped in a *DecodeError) for an event that
	// is well-formed JSON but breaks the schema: a missing required field,
	// an unknown kind, a body that does not match the kind.
	ErrInvalid = errors.New("ledger: invalid event")
	// ErrForkPointNotFound is returned by [ForkEvents] for a fork point
	// that names no user message, step or response of the session.
	ErrForkPointNotFound = errors.New("ledger: no such fork point")
	// ErrForkPointUnfinished is returned by [ForkEvents] for a fork point
	// a fork cannot start from: an event that is neither a user message
	// nor a step, a step cut short, a step with a tool call that has no
	// result, a message queued into a run that was working.
	ErrForkPointUnfinished = errors.New("ledger: the fork point is not a settled user message or step")
)

// DecodeError reports which event and which field of it could not be
// encoded or decoded.
type DecodeError struct {
	// EventID is the event's id, when it could be read.
	EventID string
	// Kind is the event's kind, when it could be read.
	Kind Kind
	// Field is the JSON path of the offending field (e.g.
	// "step.usage.prompt_tokens"), when known.
	Field string
	// Err is the cause; errors.Is reports ErrVersion and ErrInvalid.
	Err error
}

// Error describes the problem with the event, naming it and the field.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("ledger: event")
	if e.EventID != "" {
		fmt.Fprintf(&b, " %q", e.EventID)
	}
	if e.Kind != "" {
		fmt.Fprintf(&b, " (%s)", e.Kind)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "ledger: "))
	return b.String()
}

// Unwrap returns the problem (ErrVersion, ErrInvalid, or a JSON error).
func (e *DecodeError) Unwrap() error { return e.Err }

// wireEvent is the encoded form: the schema version, then the event.
type wireEvent struct {
	V int `json:"v"`
	Event
}

// header is read first, leniently, so that errors can name the event and a
// foreign version is reported as such rather than as unknown fields.
type header struct {
	V    *int   `json:"v"`
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
}

// Encode returns the event as one line of JSON (without a trailing newline)
// carrying [SchemaVersion]. It validates the event first, so an event that
// Encode accepts, Decode accepts too. Decode returns the event in canonical
// form — times in UTC, empty slices as nil, raw JSON compacted — so an
// event already in that form (as every event the host mints is) decodes to
// an equal value. Binary data in parts round-trips byte for byte.
func Encode(e Event) ([]byte, error) {
	// The fast encoder checks the texts' UTF-8 as it writes them, so
	// they are read once: the rest of the schema is checked first.
	if err := validate(e, skipText); err != nil {
		return nil, err
	}
	b, ok, badText := fastEncode(make([]byte, 0, encodedSizeHint(&e)), &e)
	if ok && !badText {
		return b, nil
	}
	// A text that is not UTF-8 (the full check names its field), or an
	// event the fast encoder cannot write.
	if err := validate(e, 0); err != nil {
		return nil, err
	}
	if ok {
		return b, nil
	}
	return slowEncode(e)
}

// slowEncode is Encode by encoding/json: the reference the fast encoder
// matches byte for byte, and the fallback that explains what it cannot
// write.
func slowEncode(e Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(wireEvent{V: SchemaVersion, Event: e}); err != nil {
		return nil, &DecodeError{EventID: e.ID, Kind: e.Kind, Err: err}
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // drop the Encoder's newline
}

// Decode parses one encoded event. Errors are *DecodeError values that name
// the event and the field at fault; errors.Is(err, ErrVersion) reports an
// event of another schema version.
func Decode(data []byte) (Event, error) { return decode(data, false) }

// DecodeOwned is [Decode] for a caller that hands data over for good: the
// event's strings may share data's memory instead of copying it, so data
// must never change afterwards. A store that keeps encodings it never
// changes, or reads one event into a buffer of its own, decodes with it at
// a fraction of the allocations. The strings keep data reachable while
// any of them is; what is not a string (raw JSON, binary data) is copied
// as Decode copies it.
func DecodeOwned(data []byte) (Event, error) { return decode(data, true) }

// decode is Decode; shared lets the fast decoder's strings share data.
func decode(data []byte, shared bool) (Event, error) {
	// The fast decoder reads the canonical form Encode writes, the common
	// case; anything else goes to the strict decoder, which decides and
	// explains. Both give the same event for what the fast one reads.
	if w, ok := fastDecode(data, shared); ok && w.V == SchemaVersion {
		e := w.Event
		normalize(&e)
		if err := validate(e, skipText|skipJSON); err != nil {
			return Event{}, err
		}
		return e, nil
	}
	return decodeStrict(data)
}

// decodeStrict is Decode through encoding/json, strictly (unknown fields
// fail): the decoder of last resort, and the one whose errors Decode
// returns.
func decodeStrict(data []byte) (Event, error) {
	// The strict decode comes first, and reads the version too. Only a
	// failure pays for the lenient header read that names the event in
	// the error.
	var w wireEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&w)
	if err == nil && len(bytes.TrimSpace(data[dec.InputOffset():])) == 0 && w.V == SchemaVersion {
		e := w.Event
		normalize(&e)
		if err := Validate(e); err != nil {
			return Event{}, err
		}
		return e, nil
	}
	var h header
	hdec := json.NewDecoder(bytes.NewReader(data))
	if herr := hdec.Decode(&h); herr != nil {
		return Event{}, &DecodeError{EventID: h.ID, Kind: h.Kind, Field: jsonField(herr), Err: herr}
	}
	if rest := bytes.TrimSpace(data[hdec.InputOffset():]); len(rest) > 0 {
		return Event{}, &DecodeError{EventID: h.ID, Kind: h.Kind, Err: fmt.Errorf("%w: trailing data after the event", ErrInvalid)}
	}
	if h.V == nil || *h.V != SchemaVersion {
		return Event{}, versionError(h)
	}
	if _, known := bodyField[h.Kind]; !known && h.Kind != "" {
		return Event{}, &DecodeError{EventID: h.ID, Kind: h.Kind, Field: "kind", Err: fmt.Errorf("%w: unknown kind %q", ErrInvalid, h.Kind)}
	}
	return Event{}, &DecodeError{EventID: h.ID, Kind: h.Kind, Field: jsonField(err), Err: err}
}

// versionError explains why an event of the header's version is not read
// by this build.
func versionError(h header) error {
	de := &DecodeError{EventID: h.ID, Kind: h.Kind, Field: "v"}
	switch v := h.V; {
	case v == nil:
		de.Err = fmt.Errorf("%w: missing", ErrVersion)
	case *v > SchemaVersion:
		de.Err = fmt.Errorf("%w %d, newer than this build's %d: upgrade agentic-host to read it", ErrVersion, *v, SchemaVersion)
	case upgradeSteps[*v] != nil:
		de.Err = fmt.Errorf("%w %d, older than this build's %d: agentic-host migrate upgrades it", ErrVersion, *v, SchemaVersion)
	default:
		de.Err = fmt.Errorf("%w %d: no build reads it (the oldest version is 1)", ErrVersion, *v)
	}
	return de
}

// normalize brings a decoded event to the form Encode writes, so that
// Decode(Encode(Decode(b))) equals Decode(b): times in UTC, empty lists and
// byte slices as nil, raw JSON compacted.
func normalize(e *Event) {
	e.Time = e.Time.UTC()
	if in := e.Input; in != nil {
		for i := range in.Parts {
			if len(in.Parts[i].Data) == 0 {
				in.Parts[i].Data = nil
			}
		}
	}
	if s := e.Step; s != nil {
		if len(s.ToolCalls) == 0 {
			s.ToolCalls = nil
		}
		if len(s.Inputs) == 0 {
			s.Inputs = nil
		}
		s.Raw = compactJSON(s.Raw)
	}
	if a := e.ApprovalRequest; a != nil {
		a.Input = compactJSON(a.Input)
		if !a.ExpiresAt.IsZero() {
			a.ExpiresAt = a.ExpiresAt.UTC()
		}
	}
	if r := e.RunStart; r != nil {
		if len(r.Inputs) == 0 {
			r.Inputs = nil
		}
		if r.Task != nil {
			t := *r.Task
			t.Schema = compactJSON(t.Schema)
			r.Task = &t
		}
	}
	if r := e.RunEnd; r != nil {
		if len(r.Inputs) == 0 {
			r.Inputs = nil
		}
		r.Deliverable = compactJSON(r.Deliverable)
	}
	if r := e.ToolResult; r != nil && r.Traffic != nil {
		normalizeTraffic(r.Traffic)
	}
}

// normalizeTraffic brings a decoded traffic record to the form Encode
// writes: empty lists and byte slices as nil.
func normalizeTraffic(t *ToolTraffic) {
	if len(t.HTTP) == 0 {
		t.HTTP = nil
	}
	if len(t.KV) == 0 {
		t.KV = nil
	}
	for i := range t.HTTP {
		x := &t.HTTP[i]
		if len(x.RequestHeaders) == 0 {
			x.RequestHeaders = nil
		}
		if len(x.ResponseHeaders) == 0 {
			x.ResponseHeaders = nil
		}
		if len(x.ResponseBodyBase64) == 0 {
			x.ResponseBodyBase64 = nil
		}
	}
	for i := range t.KV {
		a := &t.KV[i]
		if len(a.KeyBase64) == 0 {
			a.KeyBase64 = nil
		}
		if len(a.ValueBase64) == 0 {
			a.ValueBase64 = nil
		}
	}
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	if isCompact(raw) {
		return raw // as Encode writes it: nothing to do
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw // Validate reports it
	}
	return buf.Bytes()
}

// isCompact reports whether raw has no white space outside its strings (as
// json.Compact would leave it). It does not check that raw is JSON.
func isCompact(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// jsonField extracts the offending field's path from an encoding/json error.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return strings.TrimPrefix(te.Field, "Event.")
	}
	const unknown = `json: unknown field "`
	if s := err.Error(); strings.HasPrefix(s, unknown) {
		return strings.TrimSuffix(strings.TrimPrefix(s, unknown), `"`)
	}
	return ""
}

// Validate checks an event against the schema: the envelope, that exactly
// the body named by Kind is set, and the body's required fields. Errors are
// *DecodeError values wrapping [ErrInvalid].
func Validate(e Event) error { return validate(e, 0) }

// checks are what validate may skip.
type checks uint8

const (
	skipText checks = 1 << iota // the texts are known to be UTF-8, or checked elsewhere
	skipJSON                    // the raw fields are known to be JSON
)

// validate is Validate, without the checks skip names: the fast decoder's
// events are UTF-8 and their raw fields JSON already, and the fast encoder
// checks the texts as it writes them.
func validate(e Event, skip checks) error {
	checkJSON := skip&skipJSON == 0
	bad := func(field, format string, args ...any) error {
		return &DecodeError{EventID: e.ID, Kind: e.Kind, Field: field,
			Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))}
	}
	if e.ID == "" {
		return bad("id", "missing")
	}
	if e.Time.IsZero() {
		return bad("time", "missing")
	}
	if y := e.Time.UTC().Year(); y < 1 || y > 9999 {
		return bad("time", "year %d is outside 1..9999", y)
	}
	field, ok := bodyField[e.Kind]
	if !ok {
		if e.Kind == "" {
			return bad("kind", "missing")
		}
		return bad("kind", "unknown kind %q", e.Kind)
	}
	if !e.hasBody(e.Kind) {
		return bad(field, "missing body for kind %q", e.Kind)
	}
	if e.bodyCount() != 1 {
		for _, k := range Kinds() {
			if k != e.Kind && e.hasBody(k) {
				return bad(bodyField[k], "body does not match kind %q", e.Kind)
			}
		}
	}
	if e.Kind != KindInput && e.Kind != KindFork && e.RunID == "" {
		return bad("run_id", "missing")
	}
	if skip&skipText == 0 {
		if field := invalidText(&e); field != "" {
			return bad(field, "not valid UTF-8 (JSON cannot carry it verbatim)")
		}
	}
	switch e.Kind {
	case KindInput:
		in := e.Input
		if in.MessageID == "" {
			return bad("input.message_id", "missing")
		}
		if len(in.Parts) == 0 {
			return bad("input.parts", "no content")
		}
		if pc := in.Parent; pc != nil && (pc.SessionID == "" || pc.CallID == "") {
			return bad("input.parent", "session_id and call_id are required")
		}
		if o := in.Overlap; o != "" && o != OverlapInterrupt && o != OverlapRollback {
			return bad("input.overlap", "%q is not one of interrupt, rollback", o)
		}
		for i, p := range in.Parts {
			if err := validatePart(p); err != "" {
				return bad(fmt.Sprintf("input.parts[%d]", i), "%s", err)
			}
		}
	case KindRunStart:
		if len(e.RunStart.Inputs) == 0 {
			return bad("run_start.inputs", "no inputs")
		}
		if e.RunStart.ResponseID == "" {
			return bad("run_start.response_id", "missing")
		}
		if t := e.RunStart.Task; t != nil {
			if len(t.Schema) == 0 || (checkJSON && !json.Valid(t.Schema)) {
				return bad("run_start.task.schema", "missing or not valid JSON")
			}
			if t.MaxPokes < 0 {
				return bad("run_start.task.max_pokes", "negative")
			}
		}
	case KindStep:
		s := e.Step
		if s.ResponseID == "" {
			return bad("step.response_id", "missing")
		}
		if s.Index < 0 {
			return bad("step.index", "negative")
		}
		for i, c := range s.ToolCalls {
			if c.ID == "" {
				return bad(fmt.Sprintf("step.tool_calls[%d].id", i), "missing")
			}
			if c.Name == "" {
				return bad(fmt.Sprintf("step.tool_calls[%d].name", i), "missing")
			}
		}
		if len(s.Raw) > 0 && (checkJSON && !json.Valid(s.Raw)) {
			return bad("step.raw", "not valid JSON")
		}
	case KindToolStart:
		if e.ToolStart.CallID == "" {
			return bad("tool_start.call_id", "missing")
		}
		if e.ToolStart.Name == "" {
			return bad("tool_start.name", "missing")
		}
	case KindToolJournal:
		j := e.ToolJournal
		switch {
		case j.CallID == "":
			return bad("tool_journal.call_id", "missing")
		case j.Name == "":
			return bad("tool_journal.name", "missing")
		case j.Source == "":
			return bad("tool_journal.source", "missing")
		case j.At < 0:
			return bad("tool_journal.at", "negative")
		case len(j.Entries) == 0:
			return bad("tool_journal.entries", "none")
		}
		for i, x := range j.Entries {
			if x.Op == "" {
				return bad(fmt.Sprintf("tool_journal.entries[%d].op", i), "missing")
			}
		}
	case KindToolResult:
		if e.ToolResult.CallID == "" {
			return bad("tool_result.call_id", "missing")
		}
		if b := e.ToolResult.OutputBlob; b != "" && !validDigest(b) {
			return bad("tool_result.output_blob", "%.80q is not sha256: and 64 lower-case hex digits", b)
		}
		if n := e.ToolResult.OutputSize; n < 0 || (n != 0 && e.ToolResult.OutputBlob == "") {
			return bad("tool_result.output_size", "%d without an output blob, or negative", n)
		}
		if t := e.ToolResult.Traffic; t != nil {
			if field, why := invalidTraffic(t); field != "" {
				return bad("tool_result.traffic."+field, "%s", why)
			}
		}
	case KindApprovalRequest:
		if e.ApprovalRequest.ApprovalID == "" {
			return bad("approval_request.approval_id", "missing")
		}
		if e.ApprovalRequest.CallID == "" && e.ApprovalRequest.Kind == "" {
			return bad("approval_request.call_id", "missing (only a run's own request, of a kind, has no call)")
		}
		if in := e.ApprovalRequest.Input; len(in) > 0 && (checkJSON && !json.Valid(in)) {
			return bad("approval_request.input", "not valid JSON")
		}
		if e.RunID == "" {
			return bad("run_id", "missing: an approval request belongs to a run")
		}
	case KindApprovalDecision:
		if e.ApprovalDecision.ApprovalID == "" {
			return bad("approval_decision.approval_id", "missing")
		}
		d := e.ApprovalDecision
		switch d.Decision {
		case DecisionApprove, DecisionDeny, DecisionExpire, DecisionVoid, DecisionEdit, DecisionRespond:
		default:
			return bad("approval_decision.decision", "%q is not one of approve, deny, expire, void, edit, respond", d.Decision)
		}
		if d.Decision == DecisionEdit && (len(d.Input) == 0 || !json.Valid(d.Input)) {
			return bad("approval_decision.input", "an edit's input is missing, or not valid JSON")
		}
		if d.Decision == DecisionEdit && d.InputDigest != InputDigest(string(d.Input)) {
			return bad("approval_decision.input_digest", "not the digest of the edit's input")
		}
	case KindCompaction:
		if e.Compaction.Summary == "" {
			return bad("compaction.summary", "missing")
		}
		if e.Compaction.Through == "" {
			return bad("compaction.through", "missing")
		}
	case KindPoke:
		if e.Poke.Text == "" {
			return bad("poke.text", "missing")
		}
	case KindRunEnd:
		switch e.RunEnd.Status {
		case RunCompleted, RunCancelled, RunFailed, RunTimedOut, RunInterrupted:
		default:
			return bad("run_end.status", "unknown status %q", e.RunEnd.Status)
		}
		if d := e.RunEnd.Deliverable; len(d) > 0 && (checkJSON && !json.Valid(d)) {
			return bad("run_end.deliverable", "not valid JSON")
		}
		switch t := e.RunEnd.Timeout; {
		case t == "":
		case e.RunEnd.Status != RunTimedOut:
			return bad("run_end.timeout", "set on a run that ended %s, not timed_out", e.RunEnd.Status)
		case t != "total" && t != "step" && t != "first-chunk" && t != "chunk":
			return bad("run_end.timeout", "unknown timeout %q", t)
		}
	case KindResumeAttempt:
		if e.ResumeAttempt.Attempt < 1 {
			return bad("resume_attempt.attempt", "must be at least 1")
		}
	case KindRetry:
		if e.Retry.ResponseID == "" {
			return bad("retry.response_id", "missing")
		}
		if e.Retry.Attempt < 1 {
			return bad("retry.attempt", "must be at least 1")
		}
		if e.Retry.DelayMS < 0 {
			return bad("retry.delay_ms", "negative")
		}
	case KindFork:
		if e.Fork.Source == "" {
			return bad("fork.source", "missing")
		}
		if e.Fork.At == "" {
			return bad("fork.at", "missing")
		}
		if e.Fork.Copied < 0 {
			return bad("fork.copied", "negative")
		}
	}
	return nil
}

// invalidText returns the path of the first text field of e that is not
// valid UTF-8, or "". JSON would silently replace such bytes, breaking the
// verbatim round-trip; binary content belongs in a Part's Data.
func invalidText(e *Event) string {
	check := func(pairs ...string) string {
		for i := 0; i < len(pairs); i += 2 {
			if !utf8.ValidString(pairs[i+1]) {
				return pairs[i]
			}
		}
		return ""
	}
	if f := check("id", e.ID, "run_id", e.RunID); f != "" {
		return f
	}
	switch {
	case e.Input != nil:
		for i, p := range e.Input.Parts {
			if f := check("text", p.Text, "name", p.Name, "mime", p.MIME, "url", p.URL, "blob", p.Blob); f != "" {
				return fmt.Sprintf("input.parts[%d].%s", i, f)
			}
		}
		if pc := e.Input.Parent; pc != nil {
			if f := check("session_id", pc.SessionID, "run_id", pc.RunID, "call_id", pc.CallID, "agent", pc.Agent); f != "" {
				return "input.parent." + f
			}
		}
		return check("input.request_id", e.Input.RequestID, "input.overlap", e.Input.Overlap)
	case e.Step != nil:
		for i, id := range e.Step.Inputs {
			if !utf8.ValidString(id) {
				return fmt.Sprintf("step.inputs[%d]", i)
			}
		}
		for i, c := range e.Step.ToolCalls {
			if f := check("id", c.ID, "name", c.Name, "arguments", c.Arguments); f != "" {
				return fmt.Sprintf("step.tool_calls[%d].%s", i, f)
			}
		}
		return check("step.text", e.Step.Text, "step.reasoning", e.Step.Reasoning, "step.model", e.Step.Model,
			"step.response_id", e.Step.ResponseID, "step.next_response_id", e.Step.NextResponseID,
			"step.finish_reason", e.Step.FinishReason, "step.generation_id", e.Step.GenerationID)
	case e.RunStart != nil:
		for i, id := range e.RunStart.Inputs {
			if !utf8.ValidString(id) {
				return fmt.Sprintf("run_start.inputs[%d]", i)
			}
		}
		return check("run_start.response_id", e.RunStart.ResponseID, "run_start.agent", e.RunStart.Agent,
			"run_start.model", e.RunStart.Model)
	case e.ToolStart != nil:
		return check("tool_start.call_id", e.ToolStart.CallID, "tool_start.name", e.ToolStart.Name,
			"tool_start.effect", e.ToolStart.Effect)
	case e.ToolJournal != nil:
		j := e.ToolJournal
		if f := check("call_id", j.CallID, "name", j.Name, "source", j.Source); f != "" {
			return "tool_journal." + f
		}
		for i, x := range j.Entries {
			if f := check("op", x.Op, "request", x.Request, "what", x.What, "key", x.Key); f != "" {
				return fmt.Sprintf("tool_journal.entries[%d].%s", i, f)
			}
		}
		return ""
	case e.ToolResult != nil:
		if t := e.ToolResult.Traffic; t != nil {
			for i, x := range t.HTTP {
				if f := check("method", x.Method, "url", x.URL, "url_digest", x.URLDigest, "request_digest", x.RequestDigest,
					"response_digest", x.ResponseDigest, "response_body", x.ResponseBody, "error", x.Error); f != "" {
					return fmt.Sprintf("tool_result.traffic.http[%d].%s", i, f)
				}
				for j, h := range x.RequestHeaders {
					if !utf8.ValidString(h) {
						return fmt.Sprintf("tool_result.traffic.http[%d].request_headers[%d]", i, j)
					}
				}
				for j, h := range x.ResponseHeaders {
					if !utf8.ValidString(h) {
						return fmt.Sprintf("tool_result.traffic.http[%d].response_headers[%d]", i, j)
					}
				}
			}
			for i, a := range t.KV {
				if f := check("op", a.Op, "key", a.Key, "value_digest", a.ValueDigest, "value", a.Value, "error", a.Error); f != "" {
					return fmt.Sprintf("tool_result.traffic.kv[%d].%s", i, f)
				}
			}
		}
		return check("tool_result.output", e.ToolResult.Output, "tool_result.output_blob", e.ToolResult.OutputBlob, "tool_result.name", e.ToolResult.Name,
			"tool_result.call_id", e.ToolResult.CallID, "tool_result.source", e.ToolResult.Source)
	case e.ResumeAttempt != nil:
		return check("resume_attempt.host", e.ResumeAttempt.Host)
	case e.Poke != nil:
		return check("poke.text", e.Poke.Text)
	case e.Compaction != nil:
		return check("compaction.summary", e.Compaction.Summary, "compaction.through", e.Compaction.Through)
	case e.RunEnd != nil:
		for i, id := range e.RunEnd.Inputs {
			if !utf8.ValidString(id) {
				return fmt.Sprintf("run_end.inputs[%d]", i)
			}
		}
		return check("run_end.reason", e.RunEnd.Reason, "run_end.restarted_by", e.RunEnd.RestartedBy)
	case e.Retry != nil:
		return check("retry.response_id", e.Retry.ResponseID, "retry.reason", e.Retry.Reason)
	case e.Fork != nil:
		return check("fork.source", e.Fork.Source, "fork.at", e.Fork.At, "fork.item", e.Fork.Item,
			"fork.agent", e.Fork.Agent, "fork.model", e.Fork.Model)
	case e.ApprovalRequest != nil:
		a := e.ApprovalRequest
		return check("approval_request.summary", a.Summary, "approval_request.approval_id",
			a.ApprovalID, "approval_request.call_id", a.CallID, "approval_request.name", a.Name,
			"approval_request.reason", a.Reason, "approval_request.policy", a.Policy,
			"approval_request.policy_source", a.PolicySource, "approval_request.input_digest", a.InputDigest,
			"approval_request.effect", a.Effect, "approval_request.kind", a.Kind)
	case e.ApprovalDecision != nil:
		return check("approval_decision.reason", e.ApprovalDecision.Reason, "approval_decision.approval_id",
			e.ApprovalDecision.ApprovalID, "approval_decision.by", e.ApprovalDecision.By,
			"approval_decision.input_digest", e.ApprovalDecision.InputDigest, "approval_decision.response", e.ApprovalDecision.Response)
	}
	return ""
}

// invalidTraffic returns the path (below the record) of the first field of
// a traffic record that breaks the schema, and why, or "".
func invalidTraffic(t *ToolTraffic) (field, why string) {
	if t.Dropped < 0 {
		return "dropped", "negative"
	}
	for i, x := range t.HTTP {
		if x.Method == "" {
			return fmt.Sprintf("http[%d].method", i), "missing"
		}
		if x.RequestBytes < 0 || x.ResponseBytes < 0 {
			return fmt.Sprintf("http[%d]", i), "a negative byte count"
		}
		if x.ResponseBody != "" && len(x.ResponseBodyBase64) > 0 {
			return fmt.Sprintf("http[%d].response_body", i), "both as text and as base64"
		}
	}
	for i, a := range t.KV {
		switch a.Op {
		case KVGet, KVSet, KVDelete:
		default:
			return fmt.Sprintf("kv[%d].op", i), fmt.Sprintf("%q is not one of get, set, delete", a.Op)
		}
		if a.Key != "" && len(a.KeyBase64) > 0 {
			return fmt.Sprintf("kv[%d].key", i), "both as text and as base64"
		}
		if a.ValueBytes < 0 {
			return fmt.Sprintf("kv[%d].value_bytes", i), "negative"
		}
	}
	return "", ""
}

func validatePart(p Part) string {
	switch p.Type {
	case PartText:
		if p.Blob != "" || p.Size != 0 {
			return "text part has a blob"
		}
		return ""
	case PartImage, PartAudio, PartFile:
		if p.Blob != "" {
			switch {
			case !validDigest(p.Blob):
				return fmt.Sprintf("%s part's blob %.80q is not sha256: and 64 lower-case hex digits", p.Type, p.Blob)
			case len(p.Data) > 0:
				return fmt.Sprintf("%s part has both data and a blob", p.Type)
			case p.MIME == "":
				return fmt.Sprintf("%s part has a blob but no mime type", p.Type)
			case p.Size < 0:
				return fmt.Sprintf("%s part has a negative size", p.Type)
			}
			return ""
		}
		if p.Size != 0 {
			return fmt.Sprintf("%s part has a size but no blob", p.Type)
		}
		if len(p.Data) == 0 && p.URL == "" {
			return fmt.Sprintf("%s part has neither data nor url", p.Type)
		}
		if len(p.Data) > 0 && p.MIME == "" {
			return fmt.Sprintf("%s part has data but no mime type", p.Type)
		}
		return ""
	case "":
		return "missing type"
	default:
		return fmt.Sprintf("unknown part type %q", p.Type)
	}
}

// bodyField maps each kind to the JSON name of its body.
var bodyField = map[Kind]string{
	KindInput:            "input",
	KindRunStart:         "run_start",
	KindStep:             "step",
	KindToolStart:        "tool_start",
	KindToolResult:       "tool_result",
	KindApprovalRequest:  "approval_request",
	KindApprovalDecision: "approval_decision",
	KindCompaction:       "compaction",
	KindPoke:             "poke",
	KindRunEnd:           "run_end",
	KindResumeAttempt:    "resume_attempt",
	KindRetry:            "retry",
	KindFork:             "fork",
	KindToolJournal:      "tool_journal",
}

func (e *Event) hasBody(k Kind) bool {
	switch k {
	case KindInput:
		return e.Input != nil
	case KindRunStart:
		return e.RunStart != nil
	case KindStep:
		return e.Step != nil
	case KindToolStart:
		return e.ToolStart != nil
	case KindToolResult:
		return e.ToolResult != nil
	case KindApprovalRequest:
		return e.ApprovalRequest != nil
	case KindApprovalDecision:
		return e.ApprovalDecision != nil
	case KindCompaction:
		return e.Compaction != nil
	case KindPoke:
		return e.Poke != nil
	case KindRunEnd:
		return e.RunEnd != nil
	case KindResumeAttempt:
		return e.ResumeAttempt != nil
	case KindRetry:
		return e.Retry != nil
	case KindFork:
		return e.Fork != nil
	case KindToolJournal:
		return e.ToolJournal != nil
	}
	return false
}

func (e *Event) bodyCount() int {
	n := 0
	for _, k := range Kinds() {
		if e.hasBody(k) {
			n++
		}
	}
	return n
}
