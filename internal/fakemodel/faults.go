package fakemodel

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/internal/fixtures"
)

// FaultKind names one way a request can fail. The zero value is
// FaultStatus.
type FaultKind int

const (
	// FaultStatus answers with HTTP Fault.Status (default 500) and
	// Fault.Body (default: the fixture body for that status when there is
	// one — 401, 402, 403, 429, 502, 503 — else a generic OpenRouter error
	// envelope). Spec name "status".
	FaultStatus FaultKind = iota
	// FaultRateLimit is HTTP 429 with fixtures/error_429.json and the
	// Retry-After of fixtures/error_429.headers ("2"). Spec name "429".
	FaultRateLimit
	// FaultServerError is HTTP 500 with a generic error envelope. Spec
	// name "500".
	FaultServerError
	// FaultBadGateway is HTTP 502 with fixtures/error_502_provider.json.
	// Spec name "502".
	FaultBadGateway
	// FaultNoProvider is HTTP 503 with fixtures/error_503_no_provider.json.
	// Spec name "503".
	FaultNoProvider
	// FaultNoCredits is HTTP 402 with fixtures/error_402.json. Spec name
	// "402".
	FaultNoCredits
	// FaultUnauthorized is HTTP 401 with fixtures/error_401.json. Spec name
	// "401".
	FaultUnauthorized
	// FaultContextOverflow is HTTP 400 with
	// fixtures/error_context_overflow_openrouter.json. Spec name "overflow"
	// (or "400").
	FaultContextOverflow
	// FaultDrop closes the connection before any response header is sent;
	// the client sees a transport error (EOF). Spec name "drop".
	FaultDrop
	// FaultSever sends the stream's first Fault.After data chunks, then
	// closes the connection: no finish chunk, no usage, no [DONE]; the
	// client sees an unexpected EOF. A non-streaming request gets half of
	// its body. Spec name "sever".
	FaultSever
	// FaultStall sends the first Fault.After data chunks, then sends
	// nothing until the client goes away, the server closes, or Fault.Stall
	// elapses (when non-zero), after which the connection is closed as for
	// FaultSever. Spec name "stall".
	FaultStall
	// FaultErrorChunk sends the first Fault.After data chunks, then
	// OpenRouter's mid-stream error chunk (a top-level "error" object and a
	// choice with finish_reason "error", as in
	// fixtures/stream_midstream_error.sse) and ends the stream without
	// [DONE]. A non-streaming request gets HTTP 200 with the error inside the
	// choice (fixtures/nonstream_inband_error.json). Spec name "errorchunk"
	// (or "midstream").
	FaultErrorChunk
	// FaultNoFinish sends the data chunks (by default all of them) but no
	// finish chunk and no usage, then [DONE]. A non-streaming request gets
	// "finish_reason":null. Spec name "nofinish".
	FaultNoFinish
	// FaultFinishError ends an otherwise normal reply with
	// "finish_reason":"error" but no "error" object. Spec name
	// "finisherror".
	FaultFinishError
)

var faultNames = map[FaultKind]string{
	FaultStatus:          "status",
	FaultRateLimit:       "429",
	FaultServerError:     "500",
	FaultBadGateway:      "502",
	FaultNoProvider:      "503",
	FaultNoCredits:       "402",
	FaultUnauthorized:    "401",
	FaultContextOverflow: "overflow",
	FaultDrop:            "drop",
	FaultSever:           "sever",
	FaultStall:           "stall",
	FaultErrorChunk:      "errorchunk",
	FaultNoFinish:        "nofinish",
	FaultFinishError:     "finisherror",
}

var faultAliases = map[string]FaultKind{
	"400":       FaultContextOverflow,
	"midstream": FaultErrorChunk,
}

// String returns the kind's spec name, as accepted by [ParseFaults].
func (k FaultKind) String() string {
	if n, ok := faultNames[k]; ok {
		return n
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// ParseFaultKind parses a spec name (see the FaultKind constants).
func ParseFaultKind(name string) (FaultKind, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if k, ok := faultAliases[name]; ok {
		return k, nil
	}
	for k, n := range faultNames {
		if n == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown fault kind %q", name)
}

// DefaultFaultKinds returns the kinds random faults use when
// Options.FaultKinds is empty: 429, 500, 502, 503, drop, sever, errorchunk
// and nofinish — the transient failures a client should retry or recover
// from. (stall is left out because it only ends when the client gives up.)
func DefaultFaultKinds() []FaultKind {
	return []FaultKind{FaultRateLimit, FaultServerError, FaultBadGateway, FaultNoProvider,
		FaultDrop, FaultSever, FaultErrorChunk, FaultNoFinish}
}

// allFaultKinds is what "kinds=all" expands to.
func allFaultKinds() []FaultKind {
	return []FaultKind{FaultRateLimit, FaultServerError, FaultBadGateway, FaultNoProvider,
		FaultNoCredits, FaultUnauthorized, FaultContextOverflow, FaultDrop, FaultSever,
		FaultStall, FaultErrorChunk, FaultNoFinish, FaultFinishError}
}

// isHTTP reports whether the kind is an HTTP error status.
func (k FaultKind) isHTTP() bool { return k <= FaultContextOverflow }

// needsContent reports whether the fault streams part of a reply.
func (k FaultKind) needsContent() bool { return k >= FaultSever }

// Fault describes one injected failure. Only the fields that matter for
// Kind are used.
type Fault struct {
	// Kind selects the failure.
	Kind FaultKind
	// Status overrides the HTTP status of the HTTP kinds (required for
	// FaultStatus, default 500). For FaultErrorChunk it picks the error
	// object when Body is empty: 429 gives the rate-limit object of
	// fixtures/stream_midstream_error_429.sse, any other non-zero status a
	// {"code":Status,"message":…} object.
	Status int
	// Body overrides the response body of the HTTP kinds. For
	// FaultErrorChunk it is the JSON value of the "error" member instead.
	Body []byte
	// RetryAfter is the Retry-After header of the HTTP kinds. Default: the
	// fixture value ("2") for status 429, none otherwise; "-" sends none.
	RetryAfter string
	// After is how many data chunks (the first role chunk counts) are sent
	// before a mid-stream fault. 0 means the default: 2 (role chunk and one
	// content chunk) for sever, stall and errorchunk; all chunks before the
	// finish chunk for nofinish and finisherror. Negative means none. It is
	// capped at the number of chunks before the finish chunk.
	After int
	// Stall bounds FaultStall. Default 0: stall until the client goes away
	// or the server closes.
	Stall time.Duration
}

// chunksBefore returns how many of the n pre-finish chunks to send.
func (f *Fault) chunksBefore(n int) int {
	after := f.After
	switch {
	case after < 0:
		return 0
	case after == 0 && (f.Kind == FaultNoFinish || f.Kind == FaultFinishError):
		return n
	case after == 0:
		after = 2
	}
	return min(after, n)
}

// httpResponse returns the status, body and Retry-After of an HTTP fault.
func (f *Fault) httpResponse() (status int, body []byte, retryAfter string) {
	var fixture string
	switch f.Kind {
	case FaultRateLimit:
		status, fixture = http.StatusTooManyRequests, "error_429.json"
	case FaultServerError:
		status = http.StatusInternalServerError
	case FaultBadGateway:
		status, fixture = http.StatusBadGateway, "error_502_provider.json"
	case FaultNoProvider:
		status, fixture = http.StatusServiceUnavailable, "error_503_no_provider.json"
	case FaultNoCredits:
		status, fixture = http.StatusPaymentRequired, "error_402.json"
	case FaultUnauthorized:
		status, fixture = http.StatusUnauthorized, "error_401.json"
	case FaultContextOverflow:
		status, fixture = http.StatusBadRequest, "error_context_overflow_openrouter.json"
	default:
		status = http.StatusInternalServerError
	}
	if f.Status != 0 {
		status = f.Status
	}
	if f.Kind == FaultStatus {
		fixture = statusFixtures[status]
	}
	switch {
	case len(f.Body) > 0:
		body = f.Body
	case fixture != "":
		body = bytes.TrimSpace(fixtures.Bytes(fixture))
	default:
		body = errorEnvelope(status, http.StatusText(status))
	}
	switch {
	case f.RetryAfter == "-":
	case f.RetryAfter != "":
		retryAfter = f.RetryAfter
	case status == http.StatusTooManyRequests:
		retryAfter = fixtureRetryAfter()
	}
	return status, body, retryAfter
}

var statusFixtures = map[int]string{
	http.StatusUnauthorized:       "error_401.json",
	http.StatusPaymentRequired:    "error_402.json",
	http.StatusForbidden:          "error_403_moderation.json",
	http.StatusTooManyRequests:    "error_429.json",
	http.StatusBadGateway:         "error_502_provider.json",
	http.StatusServiceUnavailable: "error_503_no_provider.json",
}

// fixtureRetryAfter reads Retry-After from fixtures/error_429.headers.
func fixtureRetryAfter() string {
	sc := bufio.NewScanner(bytes.NewReader(fixtures.Bytes("error_429.headers")))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Retry-After") {
			return strings.TrimSpace(v)
		}
	}
	return "2"
}

// midstreamError returns the "error" member of a mid-stream error chunk and
// the chunk's native_finish_reason ("" to omit it).
func (f *Fault) midstreamError(model string) (errJSON []byte, native string) {
	switch {
	case len(f.Body) > 0:
		return f.Body, ""
	case f.Status == http.StatusTooManyRequests:
		msg, _ := jsonString(model + " is temporarily rate-limited upstream.")
		return []byte(`{"code":429,"message":` + msg + `,"metadata":{"error_type":"rate_limit_exceeded"}}`), "error"
	case f.Status != 0:
		msg, _ := jsonString(http.StatusText(f.Status))
		return []byte(`{"code":` + strconv.Itoa(f.Status) + `,"message":` + msg + `}`), ""
	default:
		return []byte(`{"code":"server_error","message":"Provider disconnected"}`), ""
	}
}

// inbandError returns the choice-level "error" of a non-streaming
// FaultErrorChunk answer.
func (f *Fault) inbandError(model string) []byte {
	if len(f.Body) > 0 || f.Status != 0 {
		e, _ := f.midstreamError(model)
		return e
	}
	return []byte(`{"code":502,"message":"This model is currently experiencing high demand.","metadata":{"error_type":"provider_unavailable"}}`)
}

// FaultSpec is the parsed form of a fault specification string, the value
// of a command-line flag such as --faults.
//
// Syntax: comma-separated key=value pairs, in any order, all optional:
//
//	rate=0.3          probability per chat request, 0..1 ("30%" also works)
//	kinds=429+500+sever+stall
//	                  fault kinds joined by "+" or "|" (spec names of the
//	                  FaultKind constants: status 429 500 502 503 402 401
//	                  overflow(=400) drop sever stall errorchunk(=midstream)
//	                  nofinish finisherror; "all" for every kind but status);
//	                  default DefaultFaultKinds()
//	seed=7            random seed (int64), default 0
//
// Example: "rate=0.3,kinds=429+500+sever+stall,seed=7". The empty string
// means no faults.
type FaultSpec struct {
	// Rate is the fault probability per chat request.
	Rate float64
	// Kinds are the fault kinds to draw from (nil: the default kinds).
	Kinds []FaultKind
	// Seed seeds the draw.
	Seed int64
}

// ParseFaults parses a fault specification; see [FaultSpec] for the syntax.
func ParseFaults(spec string) (FaultSpec, error) {
	var fs FaultSpec
	for field := range strings.SplitSeq(spec, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return FaultSpec{}, fmt.Errorf("faults: %q: want key=value", field)
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		switch key {
		case "rate":
			pct := strings.HasSuffix(val, "%")
			r, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
			if err != nil {
				return FaultSpec{}, fmt.Errorf("faults: rate %q: not a number", val)
			}
			if pct {
				r /= 100
			}
			if r < 0 || r > 1 {
				return FaultSpec{}, fmt.Errorf("faults: rate %q: want 0..1", val)
			}
			fs.Rate = r
		case "kinds", "kind":
			fs.Kinds = nil
			for name := range strings.FieldsFuncSeq(val, func(r rune) bool { return r == '+' || r == '|' }) {
				if strings.EqualFold(strings.TrimSpace(name), "all") {
					fs.Kinds = append(fs.Kinds, allFaultKinds()...)
					continue
				}
				k, err := ParseFaultKind(name)
				if err != nil {
					return FaultSpec{}, fmt.Errorf("faults: %v", err)
				}
				fs.Kinds = append(fs.Kinds, k)
			}
			if len(fs.Kinds) == 0 {
				return FaultSpec{}, fmt.Errorf("faults: kinds: empty list")
			}
		case "seed":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return FaultSpec{}, fmt.Errorf("faults: seed %q: not an integer", val)
			}
			fs.Seed = n
		default:
			return FaultSpec{}, fmt.Errorf("faults: unknown key %q (want rate, kinds or seed)", key)
		}
	}
	return fs, nil
}

// Apply copies the spec into opts: FaultRate, FaultKinds and Seed.
func (fs FaultSpec) Apply(opts *Options) {
	opts.FaultRate, opts.FaultKinds, opts.Seed = fs.Rate, fs.Kinds, fs.Seed
}

// String formats the spec in the syntax ParseFaults accepts.
func (fs FaultSpec) String() string {
	var b strings.Builder
	b.WriteString("rate=" + strconv.FormatFloat(fs.Rate, 'g', -1, 64))
	if len(fs.Kinds) > 0 {
		names := make([]string, len(fs.Kinds))
		for i, k := range fs.Kinds {
			names[i] = k.String()
		}
		b.WriteString(",kinds=" + strings.Join(names, "+"))
	}
	b.WriteString(",seed=" + strconv.FormatInt(fs.Seed, 10))
	return b.String()
}
