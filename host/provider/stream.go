package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
)

// Stream sends req, streams the answer, calling onDelta (which may be nil)
// for every text, reasoning and tool-call fragment in order, and returns
// the assembled pass.
//
// The request is sent exactly once. On any error Stream also returns the
// partial result: what had streamed so far, with the tool calls that were
// complete. When ctx is done before the pass finished, the error is
// ctx.Err() (context.Canceled or context.DeadlineExceeded). Otherwise it is an
// [*model.Error] (HTTP error status, or an error chunk or finish_reason "error"
// mid-stream), [model.ErrIncompleteStream], [model.ErrStalled], [model.ErrMalformedStream],
// [model.ErrInvalidRequest] (nothing was sent), or a transport error.
//
// onDelta runs on the caller's goroutine, between reads of the stream.
func (c *Client) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	// The body: written without reflection when it can be (fastrequest.go),
	// else built and marshalled by openai-go.
	var body any
	if b, ok := c.encodeRequest(req); ok {
		body = b
	} else {
		params, err := c.buildParams(req)
		if err != nil {
			return model.Result{}, err
		}
		body = params
	}
	if onDelta == nil {
		onDelta = func(model.Delta) {}
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var httpRes *http.Response
	opts := []option.RequestOption{option.WithResponseInto(&httpRes)}
	if c.idleTimeout > 0 {
		wd := &watchdog{d: c.idleTimeout, fire: func() { cancel(model.ErrStalled) }}
		defer wd.stop()
		opts = append(opts, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if err == nil && res != nil && res.Body != nil {
				res.Body = &watchedBody{ReadCloser: res.Body, wd: wd}
				wd.start()
			}
			return res, err
		}))
	}

	st := newStreamState(req.Model, onDelta)
	// The request goes through openai-go (its request options, errors and
	// status handling); the event stream is read here, each chunk decoded
	// by the fast path when it can and by openai-go otherwise (chunk.go).
	var raw *http.Response
	if _, ok := body.([]byte); !ok {
		opts = append(opts, option.WithJSONSet("stream", true))
	}
	serr := c.api.Post(sctx, "chat/completions", body, &raw, opts...)
	if raw != nil && raw.Body != nil {
		defer raw.Body.Close()
	}
	if serr == nil && httpRes != nil {
		serr = c.checkResponse(httpRes)
	}
	if serr == nil && raw != nil {
		dec := ssestream.NewDecoder(raw)
		var ch chunk
		for dec.Next() {
			ev := dec.Event()
			if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
				drain(raw.Body, cancel)
				break
			}
			if serr = decodeChunk(ev, &ch); serr != nil {
				break
			}
			if req.RawChunks {
				onDelta(model.Delta{Kind: model.DeltaRaw, Raw: bytes.Clone(ev.Data)})
			}
			st.add(&ch)
		}
		if serr == nil {
			serr = dec.Err()
		}
	}
	if httpRes != nil && st.id == "" {
		st.id = httpRes.Header.Get("X-Generation-Id")
	}
	res := st.result()

	if serr != nil {
		switch {
		case ctx.Err() != nil:
			return res, ctx.Err()
		case errors.Is(context.Cause(sctx), model.ErrStalled):
			return res, fmt.Errorf("%w: no data for %s", model.ErrStalled, c.idleTimeout)
		default:
			return res, c.classify(serr, httpRes)
		}
	}
	// The stream ended cleanly; a pass that finished is returned even if
	// ctx is done by now.
	switch res.FinishReason {
	case "":
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if errors.Is(context.Cause(sctx), model.ErrStalled) {
			return res, fmt.Errorf("%w: no data for %s", model.ErrStalled, c.idleTimeout)
		}
		return res, model.ErrIncompleteStream
	case "error":
		msg := `the provider ended the stream with finish_reason "error" and sent no error details`
		if st.nativeFinish != "" && st.nativeFinish != "error" {
			msg += fmt.Sprintf(" (native finish reason %q)", st.nativeFinish)
		}
		return res, &model.Error{MidStream: true, Message: msg}
	}
	return res, nil
}

// drainWait and drainMax bound the reading of what follows "[DONE]"
// (drainWait is a variable for the tests).
var drainWait = 50 * time.Millisecond

const drainMax = 4 << 10

// errDrained ends a response body that went on after "[DONE]".
var errDrained = errors.New("provider: the stream went on after [DONE]")

// drain reads what follows "[DONE]" — the end of the chunked body, which
// servers send right after it — so that the connection goes back to the
// pool: a body closed before its end closes its connection, and the next
// pass would dial again. A body that does not end within drainWait and
// drainMax is cut, through the request's context (cancel), and its
// connection closed.
func drain(body io.Reader, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(drainWait, func() { cancel(errDrained) })
	_, _ = io.CopyN(io.Discard, body, drainMax)
	t.Stop()
}

// checkResponse rejects a 2xx response that is not an event stream. A JSON
// body with an "error" member becomes an [*model.Error].
func (c *Client) checkResponse(res *http.Response) error {
	if res.StatusCode < 200 || res.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return httpError(res, body, nil, time.Now())
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if mt != "application/json" {
		return nil // text/event-stream, or a server that labels it loosely
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	e := &model.Error{Header: res.Header.Clone(), Body: body}
	if fill(e, body) {
		if n, err := strconv.Atoi(e.Code); err == nil && n >= 100 && n <= 599 {
			e.StatusCode = n
		}
		e.RetryAfter = retryAfter(res.Header, time.Now())
		if e.RetryAfter == 0 {
			e.RetryAfter = metadataRetryAfter(e.Metadata)
		}
		if e.Message == "" {
			e.Message = "the provider answered with an error object"
		}
		return e
	}
	return fmt.Errorf("%w: expected an event stream, got %s: %s", model.ErrMalformedStream, mt, truncate(string(body), 200))
}

// classify turns the error that ended a stream into the package's errors.
func (c *Client) classify(err error, httpRes *http.Response) error {
	var se *ssestream.StreamError
	var apiErr *openai.Error
	var pe *model.Error
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &se):
		return streamError(se)
	case errors.As(err, &apiErr):
		return fromAPIError(apiErr, time.Now())
	case errors.Is(err, model.ErrMalformedStream):
		return err
	case httpRes != nil && httpRes.StatusCode >= 400:
		// openai-go could not parse the error body (not JSON); it has put
		// the body back.
		var body []byte
		if httpRes.Body != nil {
			body, _ = io.ReadAll(io.LimitReader(httpRes.Body, 1<<20))
		}
		return httpError(httpRes, body, err, time.Now())
	case errors.As(err, &syn), errors.As(err, &typ):
		return fmt.Errorf("%w: %v", model.ErrMalformedStream, err)
	case httpRes != nil:
		return fmt.Errorf("provider: reading the stream: %w", err)
	default:
		return fmt.Errorf("provider: sending the request: %w", err)
	}
}

// streamState assembles a stream's chunks.
type streamState struct {
	onDelta func(model.Delta)

	id, model    string
	nativeFinish string
	finish       string // the finish reason of the last choice seen
	sawChoice    bool
	text         strings.Builder
	reasoning    strings.Builder
	details      []map[string]json.RawMessage // merged reasoning_details
	usage        ledger.Usage
	gotUsage     bool
	deltas       []model.Delta // one chunk's, reused

	calls []callState   // by our dense index
	remap map[int64]int // provider index → our index
}

type callState struct {
	id, name string
	args     strings.Builder
}

func newStreamState(model string, onDelta func(model.Delta)) *streamState {
	return &streamState{onDelta: onDelta, model: model}
}

// add folds one chunk into the state and reports its deltas.
func (s *streamState) add(ch *chunk) {
	if s.id == "" {
		s.id = ch.ID
	}
	if ch.Model != "" {
		s.model = ch.Model
	}
	deltas := s.deltas[:0]
	for i := range ch.Choices {
		choice := &ch.Choices[i]
		s.sawChoice = true
		s.finish = choice.FinishReason
		if choice.NativeFinish != "" {
			s.nativeFinish = choice.NativeFinish
		}
		if choice.Reasoning != "" {
			deltas = append(deltas, model.Delta{Kind: model.DeltaReasoning, Text: choice.Reasoning})
		}
		if choice.Content != "" {
			deltas = append(deltas, model.Delta{Kind: model.DeltaText, Text: choice.Content})
		}
		if choice.Refusal != "" {
			deltas = append(deltas, model.Delta{Kind: model.DeltaText, Text: choice.Refusal})
		}
		for j := range choice.ToolCalls {
			if td, ok := s.toolDelta(&choice.ToolCalls[j]); ok {
				deltas = append(deltas, td)
			}
		}
	}
	if ch.HasUsage {
		s.usage, s.gotUsage = parseUsage(ch.Usage), true
	}
	for i := range ch.Choices {
		if ch.Choices[i].HasDetails {
			s.addDetails(ch.Choices[i].Details)
		}
	}
	for _, d := range deltas {
		switch d.Kind {
		case model.DeltaText:
			s.text.WriteString(d.Text)
		case model.DeltaReasoning:
			s.reasoning.WriteString(d.Text)
		}
		s.onDelta(d)
	}
	clear(deltas)
	s.deltas = deltas[:0]
}

// toolDelta maps a tool-call fragment's index to a dense one, in order of
// first appearance, folds the fragment into its call and returns the
// delta to report. A fragment with a new id at an index already used by
// another call starts a new call (some servers send every call at index
// 0). A name repeated on every fragment is taken once (openai-go's
// accumulator, which this replaces, would concatenate it).
func (s *streamState) toolDelta(tc *chunkToolCall) (model.Delta, bool) {
	raw := tc.Index
	if raw == -1 {
		raw = 0 // AWS Bedrock's single call
	}
	i, ok := s.remap[raw]
	if ok && tc.ID != "" && s.calls[i].id != "" && s.calls[i].id != tc.ID {
		ok = false
	}
	if !ok {
		i = len(s.calls)
		s.calls = append(s.calls, callState{})
		if s.remap == nil {
			s.remap = make(map[int64]int, 2)
		}
		s.remap[raw] = i
	}
	c := &s.calls[i]
	news := false
	if tc.ID != "" && c.id == "" {
		c.id, news = tc.ID, true
	}
	switch name := tc.Name; {
	case name == "":
	case c.name == "":
		c.name, news = name, true
	case name == c.name:
		// a repeat, not a fragment
	default:
		c.name += name
		news = true
	}
	c.args.WriteString(tc.Arguments)
	if !news && tc.Arguments == "" {
		return model.Delta{}, false
	}
	return model.Delta{Kind: model.DeltaToolCall, Text: tc.Arguments, ToolIndex: i, ToolCallID: c.id, ToolName: c.name}, true
}

// reasoningText returns a delta's reasoning fragment: OpenRouter's
// "reasoning", else "reasoning_content" (DeepSeek, vLLM, …).
func reasoningText(d *openai.ChatCompletionChunkChoiceDelta) string {
	for _, key := range []string{"reasoning", "reasoning_content"} {
		if f, ok := d.JSON.ExtraFields[key]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				return s
			}
			if f.Valid() {
				return ""
			}
		}
	}
	return ""
}

// addDetails merges streamed reasoning_details entries: consecutive
// fragments of the same index and type are joined (text, summary and data
// concatenated, other fields taking the latest value).
func (s *streamState) addDetails(raw string) {
	if raw == "" || raw == "null" {
		return
	}
	var entries []map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &entries) != nil {
		return
	}
	for _, e := range entries {
		if e == nil {
			continue
		}
		if n := len(s.details); n > 0 {
			last := s.details[n-1]
			idx, hasIdx := e["index"]
			if hasIdx && string(idx) == string(last["index"]) && string(e["type"]) == string(last["type"]) {
				for k, v := range e {
					switch k {
					case "text", "summary", "data":
						a, b := jsonText(last[k]), jsonText(v)
						joined, _ := json.Marshal(a + b)
						last[k] = joined
					default:
						if jsonText(v) != "" {
							last[k] = v
						}
					}
				}
				continue
			}
		}
		s.details = append(s.details, e)
	}
}

// result assembles the pass. When no finish reason arrived, or the
// finish reason is "error", the last tool call is left out: its arguments
// may be cut.
func (s *streamState) result() model.Result {
	r := model.Result{Text: s.text.String(), Reasoning: s.reasoning.String(), Model: s.model, GenerationID: s.id, Usage: s.usage}
	if !s.gotUsage {
		r.Usage.CostUnknown = true // the stream ended without a usage
	}
	if len(s.details) > 0 {
		r.Raw, _ = json.Marshal(map[string]any{"reasoning_details": s.details})
	}
	if !s.sawChoice {
		return r
	}
	r.FinishReason = s.finish
	n := len(s.calls)
	if (r.FinishReason == "" || r.FinishReason == "error") && n > 0 {
		n--
	}
	for i := 0; i < n; i++ {
		tc := &s.calls[i]
		id := tc.id
		if id == "" {
			// Some servers send no ids; the host pairs results by id.
			id = fmt.Sprintf("call_%d_%s", i, s.id)
		}
		r.ToolCalls = append(r.ToolCalls, ledger.ToolCall{ID: id, Name: tc.name, Arguments: tc.args.String()})
	}
	return r
}

// parseUsage is ParseUsage of a raw JSON string.
func parseUsage(raw string) ledger.Usage { return ParseUsage([]byte(raw)) }

// ParseUsage reads a chat completion's usage object — the "usage" of the
// final chunk of a stream (with OpenAI's "stream_options":
// {"include_usage": true}), or of a whole response — with the fields
// OpenRouter adds: the billed cost, whether the key was the caller's own
// (is_byok) and the upstream cost, cached, cache-write and reasoning
// tokens. A field of an unexpected type is skipped, never fatal (is_byok
// is taken only when it is a JSON boolean), and anything that is not a
// JSON object reads as a zero Usage. A usage without a numeric "cost"
// (and anything that is not a usage) is CostUnknown. The step's billed cost is then [ledger.Usage.Billed].
func ParseUsage(raw []byte) ledger.Usage {
	if u, ok := parseUsageFast(raw); ok {
		return u
	}
	return parseUsageSlow(raw)
}

// parseUsageSlow is ParseUsage by encoding/json, field by field: the
// reference [parseUsageFast] is pinned to (TestUsageParsersAgree,
// FuzzUsageParsers).
func parseUsageSlow(raw []byte) ledger.Usage {
	var u struct {
		Prompt     json.RawMessage `json:"prompt_tokens"`
		Completion json.RawMessage `json:"completion_tokens"`
		Total      json.RawMessage `json:"total_tokens"`
		Cost       json.RawMessage `json:"cost"`
		IsBYOK     json.RawMessage `json:"is_byok"`
		PromptDet  struct {
			Cached     json.RawMessage `json:"cached_tokens"`
			CacheWrite json.RawMessage `json:"cache_write_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionDet struct {
			Reasoning json.RawMessage `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
		CostDet struct {
			Upstream json.RawMessage `json:"upstream_inference_cost"`
		} `json:"cost_details"`
	}
	var out ledger.Usage
	// Decode field by field so that one odd field spoils nothing else.
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return ledger.Usage{CostUnknown: true}
	}
	set := func(key string, dst any) {
		if v, ok := top[key]; ok {
			_ = json.Unmarshal(v, dst)
		}
	}
	set("prompt_tokens", &u.Prompt)
	set("completion_tokens", &u.Completion)
	set("total_tokens", &u.Total)
	set("cost", &u.Cost)
	set("is_byok", &u.IsBYOK)
	set("prompt_tokens_details", &u.PromptDet)
	set("completion_tokens_details", &u.CompletionDet)
	set("cost_details", &u.CostDet)

	out.PromptTokens = intOf(u.Prompt)
	out.CompletionTokens = intOf(u.Completion)
	out.TotalTokens = intOf(u.Total)
	out.CachedTokens = intOf(u.PromptDet.Cached)
	out.CacheWriteTokens = intOf(u.PromptDet.CacheWrite)
	out.ReasoningTokens = intOf(u.CompletionDet.Reasoning)
	out.Cost = floatOf(u.Cost)
	out.CostUnknown = !isNumber(u.Cost)
	out.UpstreamCost = floatOf(u.CostDet.Upstream)
	switch strings.TrimSpace(string(u.IsBYOK)) {
	case "true":
		t := true
		out.IsBYOK = &t
	case "false":
		f := false
		out.IsBYOK = &f
	}
	return out
}

// isNumber reports whether raw is a JSON number.
func isNumber(raw json.RawMessage) bool {
	var f float64
	return json.Unmarshal(raw, &f) == nil
}

// floatOf reads a JSON number; anything else is 0.
func floatOf(raw json.RawMessage) float64 {
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		return 0
	}
	return f
}

// intOf reads a JSON number as an integer (truncating a fraction); anything
// else is 0.
func intOf(raw json.RawMessage) int64 {
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0
	}
	if i, err := n.Int64(); err == nil {
		return i
	}
	if f, err := n.Float64(); err == nil && f > -9.2e18 && f < 9.2e18 {
		return int64(f)
	}
	return 0
}

// watchdog fires when it is not kicked for d after start.
type watchdog struct {
	d    time.Duration
	fire func()

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (w *watchdog) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t == nil && !w.stopped {
		w.t = time.AfterFunc(w.d, w.fire)
	}
}

func (w *watchdog) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil && !w.stopped {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
}

// watchedBody kicks its watchdog on every read that returns data.
type watchedBody struct {
	io.ReadCloser
	wd *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.wd.kick()
	}
	return n, err
}
