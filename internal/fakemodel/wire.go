package fakemodel

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// call serves one chat request.
type call struct {
	srv     *Server
	w       http.ResponseWriter
	r       *http.Request
	req     Request
	reply   Reply
	fault   *Fault
	genID   string
	created int64
	sent    int // data events sent
}

func (c *call) serve() {
	if f := c.fault; f != nil {
		switch {
		case f.Kind.isHTTP():
			status, body, retryAfter := f.httpResponse()
			if retryAfter != "" {
				c.w.Header().Set("Retry-After", retryAfter)
			}
			writeRaw(c.w, status, body)
			return
		case f.Kind == FaultDrop:
			abort(c.w)
			return
		}
	}
	c.genID = newGenID()
	c.created = time.Now().Unix()
	c.w.Header().Set("X-Generation-Id", c.genID)
	// The slice may be shared with the script (and other requests): copy it
	// before filling in ids.
	c.reply.ToolCalls = append([]ToolCall(nil), c.reply.ToolCalls...)
	for i := range c.reply.ToolCalls {
		tc := &c.reply.ToolCalls[i]
		if tc.ID == "" {
			tc.ID = "call_" + randomString(24)
		}
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
	}
	if c.req.Stream {
		c.stream()
	} else {
		c.complete()
	}
}

func (c *call) finishReason() string {
	if c.reply.FinishReason != "" {
		return c.reply.FinishReason
	}
	if len(c.reply.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// --- streaming ---

type chunk struct {
	ID       string        `json:"id"`
	Provider string        `json:"provider"`
	Model    string        `json:"model"`
	Object   string        `json:"object"`
	Created  int64         `json:"created"`
	Choices  []chunkChoice `json:"choices"`
	Usage    *usageJSON    `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index              int       `json:"index"`
	Delta              delta     `json:"delta"`
	FinishReason       *string   `json:"finish_reason"`
	NativeFinishReason *string   `json:"native_finish_reason"`
	Logprobs           *struct{} `json:"logprobs"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content"`
	Reasoning string          `json:"reasoning,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type errorChunk struct {
	ID       string             `json:"id"`
	Object   string             `json:"object"`
	Created  int64              `json:"created"`
	Model    string             `json:"model"`
	Provider string             `json:"provider"`
	Error    json.RawMessage    `json:"error"`
	Choices  []errorChunkChoice `json:"choices"`
}

type errorChunkChoice struct {
	Index int `json:"index"`
	Delta struct {
		Content string `json:"content"`
	} `json:"delta"`
	FinishReason       string `json:"finish_reason"`
	NativeFinishReason string `json:"native_finish_reason,omitempty"`
}

func strp(s string) *string { return &s }

func (c *call) chunk(d delta) chunk {
	return chunk{ID: c.genID, Provider: c.srv.provider, Model: c.req.Model, Object: "chat.completion.chunk",
		Created: c.created, Choices: []chunkChoice{{Delta: d}}}
}

// events returns the data chunks before the finish chunk, the finish chunk
// (for finish reason fr) and the usage chunk.
func (c *call) events(fr string) (pre []chunk, finish, usage chunk) {
	pre = append(pre, c.chunk(delta{Role: "assistant", Content: strp("")}))
	for _, piece := range splitWords(c.reply.Reasoning, c.srv.opts.ChunkSize) {
		pre = append(pre, c.chunk(delta{Role: "assistant", Content: strp(""), Reasoning: piece}))
	}
	for _, piece := range splitWords(c.reply.Text, c.srv.opts.ChunkSize) {
		pre = append(pre, c.chunk(delta{Role: "assistant", Content: strp(piece)}))
	}
	for i, tc := range c.reply.ToolCalls {
		pre = append(pre, c.chunk(delta{Role: "assistant", ToolCalls: []toolCallDelta{{
			Index: i, ID: tc.ID, Type: "function", Function: functionDelta{Name: tc.Name}}}}))
		for _, frag := range splitFragments(tc.Arguments) {
			pre = append(pre, c.chunk(delta{Role: "assistant", ToolCalls: []toolCallDelta{{
				Index: i, Function: functionDelta{Arguments: frag}}}}))
		}
	}
	finish = c.chunk(delta{Role: "assistant", Content: strp("")})
	finish.Choices[0].FinishReason, finish.Choices[0].NativeFinishReason = strp(fr), strp(fr)
	u := c.usage()
	usage = chunk{ID: c.genID, Provider: c.srv.provider, Model: c.req.Model, Object: "chat.completion.chunk",
		Created: c.created, Choices: []chunkChoice{}, Usage: &u}
	return pre, finish, usage
}

func (c *call) stream() {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.w.WriteHeader(http.StatusOK)
	if !c.srv.opts.NoKeepAliveComment {
		_, _ = c.w.Write([]byte(": OPENROUTER PROCESSING\n\n"))
	}
	c.flush()

	f := c.fault
	fr := c.finishReason()
	if f != nil && f.Kind == FaultFinishError {
		fr = "error"
	}
	pre, finish, usage := c.events(fr)
	if f == nil {
		if hold := c.reply.Hold; hold != nil {
			// The role chunk, the reasoning, then HoldAfter chunks of text.
			n := min(len(pre), 1+len(splitWords(c.reply.Reasoning, c.srv.opts.ChunkSize))+max(c.reply.HoldAfter, 0))
			if c.send(pre[:n]...) != nil {
				return
			}
			select {
			case <-hold:
			case <-c.r.Context().Done():
				return
			case <-c.srv.done:
				return
			}
			pre = pre[n:]
		}
		if c.send(pre...) == nil && c.send(finish, usage) == nil {
			_ = c.done()
		}
		return
	}
	n := f.chunksBefore(len(pre))
	if c.send(pre[:n]...) != nil {
		return
	}
	switch f.Kind {
	case FaultFinishError:
		if c.send(finish, usage) == nil {
			_ = c.done()
		}
	case FaultSever:
		abort(c.w)
	case FaultStall:
		c.stall(f.Stall)
		abort(c.w)
	case FaultErrorChunk:
		errJSON, native := f.midstreamError(c.req.Model)
		ec := errorChunk{ID: c.genID, Object: "chat.completion.chunk", Created: c.created, Model: c.req.Model,
			Provider: c.srv.provider, Error: errJSON, Choices: []errorChunkChoice{{FinishReason: "error", NativeFinishReason: native}}}
		_ = c.sendJSON(ec)
	case FaultNoFinish:
		_ = c.done()
	}
}

// send writes chunks as SSE data events, pausing Options.Latency before
// each but the first.
func (c *call) send(chunks ...chunk) error {
	for _, ch := range chunks {
		if err := c.sendJSON(ch); err != nil {
			return err
		}
	}
	return nil
}

func (c *call) sendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.event(b)
}

func (c *call) done() error { return c.event([]byte("[DONE]")) }

func (c *call) event(data []byte) error {
	if c.sent > 0 && c.srv.opts.Latency > 0 {
		t := time.NewTimer(c.srv.opts.Latency)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			return c.r.Context().Err()
		case <-c.srv.done:
			t.Stop()
			return http.ErrServerClosed
		}
	}
	c.sent++
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := c.w.Write(buf); err != nil {
		return err
	}
	c.flush()
	return nil
}

func (c *call) flush() {
	if fl, ok := c.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// stall blocks until the client goes away, the server closes or d (if
// positive) elapses.
func (c *call) stall(d time.Duration) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.r.Context().Done():
	case <-c.srv.done:
	case <-timeout:
	}
}

// abort closes the connection without completing the response.
func abort(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// --- non-streaming ---

type completion struct {
	ID       string             `json:"id"`
	Provider string             `json:"provider"`
	Model    string             `json:"model"`
	Object   string             `json:"object"`
	Created  int64              `json:"created"`
	Choices  []completionChoice `json:"choices"`
	Usage    usageJSON          `json:"usage"`
}

type completionChoice struct {
	Index              int               `json:"index"`
	Logprobs           *struct{}         `json:"logprobs"`
	FinishReason       *string           `json:"finish_reason"`
	NativeFinishReason *string           `json:"native_finish_reason"`
	Message            completionMessage `json:"message"`
	Error              json.RawMessage   `json:"error,omitempty"`
}

type completionMessage struct {
	Role      string               `json:"role"`
	Content   string               `json:"content"`
	Refusal   *string              `json:"refusal"`
	Reasoning *string              `json:"reasoning"`
	ToolCalls []completionToolCall `json:"tool_calls,omitempty"`
}

type completionToolCall struct {
	ID       string        `json:"id"`
	Type     string        `json:"type"`
	Function functionDelta `json:"function"`
}

func (c *call) complete() {
	f := c.fault
	fr := strp(c.finishReason())
	msg := completionMessage{Role: "assistant", Content: c.reply.Text}
	if c.reply.Reasoning != "" {
		msg.Reasoning = strp(c.reply.Reasoning)
	}
	for _, tc := range c.reply.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, completionToolCall{ID: tc.ID, Type: "function",
			Function: functionDelta{Name: tc.Name, Arguments: tc.Arguments}})
	}
	choice := completionChoice{Message: msg}
	if f != nil {
		switch f.Kind {
		case FaultErrorChunk:
			fr = strp("error")
			choice.Message = completionMessage{Role: "assistant"}
			choice.Error = f.inbandError(c.req.Model)
		case FaultFinishError:
			fr = strp("error")
		case FaultNoFinish:
			fr = nil
		}
	}
	choice.FinishReason, choice.NativeFinishReason = fr, fr
	body, err := json.Marshal(completion{ID: c.genID, Provider: c.srv.provider, Model: c.req.Model,
		Object: "chat.completion", Created: c.created, Choices: []completionChoice{choice}, Usage: c.usage()})
	if err != nil {
		writeJSONError(c.w, http.StatusInternalServerError, err.Error())
		return
	}
	if f != nil && (f.Kind == FaultSever || f.Kind == FaultStall) {
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(http.StatusOK)
		if f.Kind == FaultSever {
			_, _ = c.w.Write(body[:len(body)/2])
		}
		c.flush()
		if f.Kind == FaultStall {
			c.stall(f.Stall)
		}
		abort(c.w)
		return
	}
	writeRaw(c.w, http.StatusOK, body)
}

// --- usage ---

type usageJSON struct {
	PromptTokens        int     `json:"prompt_tokens"`
	CompletionTokens    int     `json:"completion_tokens"`
	TotalTokens         int     `json:"total_tokens"`
	Cost                float64 `json:"cost"`
	IsBYOK              *bool   `json:"is_byok,omitempty"`
	PromptTokensDetails struct {
		CachedTokens     int `json:"cached_tokens"`
		CacheWriteTokens int `json:"cache_write_tokens"`
		AudioTokens      int `json:"audio_tokens"`
		VideoTokens      int `json:"video_tokens"`
	} `json:"prompt_tokens_details"`
	CostDetails struct {
		UpstreamInferenceCost            float64 `json:"upstream_inference_cost"`
		UpstreamInferencePromptCost      float64 `json:"upstream_inference_prompt_cost"`
		UpstreamInferenceCompletionsCost float64 `json:"upstream_inference_completions_cost"`
	} `json:"cost_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
		ImageTokens     int `json:"image_tokens"`
	} `json:"completion_tokens_details"`
}

// tokens estimates the token count of s: about 4 bytes a token, rounded up.
func tokens(s string) int { return (len(s) + 3) / 4 }

// estimatePromptTokens estimates a request's prompt tokens from the length
// of all message text and tool calls (at least 1).
func estimatePromptTokens(req Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Text)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
	}
	return max(1, n/4)
}

func (c *call) usage() usageJSON {
	var u usageJSON
	if x := c.reply.Usage; x != nil {
		u.PromptTokens, u.CompletionTokens, u.TotalTokens = x.PromptTokens, x.CompletionTokens, x.TotalTokens
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		u.Cost, u.IsBYOK = x.Cost, x.IsBYOK
		u.PromptTokensDetails.CachedTokens = x.CachedTokens
		u.PromptTokensDetails.CacheWriteTokens = x.CacheWriteTokens
		u.CompletionTokensDetails.ReasoningTokens = x.ReasoningTokens
		upstream := x.UpstreamCost
		if upstream == 0 && (x.IsBYOK == nil || !*x.IsBYOK) {
			upstream = x.Cost
		}
		p, comp := x.UpstreamPromptCost, x.UpstreamCompletionsCost
		if p == 0 && comp == 0 && upstream != 0 {
			if total := u.PromptTokens + u.CompletionTokens; total > 0 {
				p = upstream * float64(u.PromptTokens) / float64(total)
			}
			comp = upstream - p
		}
		u.CostDetails.UpstreamInferenceCost = upstream
		u.CostDetails.UpstreamInferencePromptCost = p
		u.CostDetails.UpstreamInferenceCompletionsCost = comp
		return u
	}
	reasoning := tokens(c.reply.Reasoning)
	completion := tokens(c.reply.Text) + reasoning
	for _, tc := range c.reply.ToolCalls {
		completion += tokens(tc.Name) + tokens(tc.Arguments)
	}
	u.PromptTokens = estimatePromptTokens(c.req)
	u.CompletionTokens = max(1, completion)
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.IsBYOK = Bool(false)
	u.CompletionTokensDetails.ReasoningTokens = reasoning
	return u
}

// --- models ---

type modelEntry struct {
	ID            string `json:"id"`
	CanonicalSlug string `json:"canonical_slug"`
	HuggingFaceID string `json:"hugging_face_id"`
	Name          string `json:"name"`
	Created       int64  `json:"created"`
	Description   string `json:"description"`
	ContextLength int    `json:"context_length"`
	Architecture  struct {
		Modality         string   `json:"modality"`
		InputModalities  []string `json:"input_modalities"`
		OutputModalities []string `json:"output_modalities"`
		Tokenizer        string   `json:"tokenizer"`
		InstructType     *string  `json:"instruct_type"`
	} `json:"architecture"`
	Pricing struct {
		Prompt     string `json:"prompt"`
		Completion string `json:"completion"`
	} `json:"pricing"`
	TopProvider struct {
		ContextLength       int  `json:"context_length"`
		MaxCompletionTokens int  `json:"max_completion_tokens"`
		IsModerated         bool `json:"is_moderated"`
	} `json:"top_provider"`
	PerRequestLimits    *struct{}      `json:"per_request_limits"`
	SupportedParameters []string       `json:"supported_parameters"`
	DefaultParameters   map[string]any `json:"default_parameters"`
	ExpirationDate      *string        `json:"expiration_date"`
}

func modelsList(models map[string]int) map[string][]modelEntry {
	ids := make([]string, 0, len(models))
	for id := range models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	list := make([]modelEntry, 0, len(ids))
	for _, id := range ids {
		var e modelEntry
		e.ID, e.CanonicalSlug, e.Name = id, id, "Fake: "+id
		e.Created = 1767225600
		e.Description = "A fake model served by internal/fakemodel."
		e.ContextLength = models[id]
		e.Architecture.Modality = "text+image->text"
		e.Architecture.InputModalities = []string{"text", "image"}
		e.Architecture.OutputModalities = []string{"text"}
		e.Architecture.Tokenizer = "Other"
		e.Pricing.Prompt, e.Pricing.Completion = "0", "0"
		e.TopProvider.ContextLength = models[id]
		e.TopProvider.MaxCompletionTokens = max(1, models[id]/4)
		e.SupportedParameters = []string{"include_reasoning", "max_tokens", "reasoning", "stop",
			"temperature", "tool_choice", "tools"}
		e.DefaultParameters = map[string]any{}
		list = append(list, e)
	}
	return map[string][]modelEntry{"data": list}
}

// --- helpers ---

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorEnvelope is OpenRouter's error body.
func errorEnvelope(status int, message string) []byte {
	msg, _ := jsonString(message)
	return []byte(`{"error":{"message":` + msg + `,"code":` + strconv.Itoa(status) + `}}`)
}

func writeJSONError(w http.ResponseWriter, status int, message string) {
	writeRaw(w, status, errorEnvelope(status, message))
}

// overflowBody is OpenRouter's pre-flight context-overflow refusal.
func overflowBody(window, prompt, output int) []byte {
	msg, _ := jsonString(fmt.Sprintf("This endpoint's maximum context length is %d tokens. However, you requested about %d tokens (%d of text input, %d in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.",
		window, prompt+output, prompt, output))
	return []byte(`{"error":{"message":` + msg + `,"code":400,"metadata":{"provider_name":null}}}`)
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomString(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[rand.IntN(len(alnum))]
	}
	return string(b)
}

func newGenID() string {
	return "gen-" + strconv.FormatInt(time.Now().Unix(), 10) + "-" + randomString(20)
}

// splitWords splits s into pieces of n words each; each word keeps the
// whitespace that follows it, so the pieces concatenate back to s.
func splitWords(s string, n int) []string {
	if s == "" {
		return nil
	}
	var pieces []string
	start, words := 0, 0
	prevSpace, seenWord := true, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && prevSpace {
			// A word starts at i; it ends the piece when it is the n+1th.
			if seenWord {
				words++
				if words == n {
					pieces = append(pieces, s[start:i])
					start, words = i, 0
				}
			}
			seenWord = true
		}
		prevSpace = space
	}
	return append(pieces, s[start:])
}

// splitFragments splits tool-call arguments into about three fragments at
// rune boundaries, as providers stream them.
func splitFragments(s string) []string {
	size := max(8, (len(s)+2)/3)
	var frags []string
	for len(s) > size {
		cut := size
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = size
		}
		frags = append(frags, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		frags = append(frags, s)
	}
	return frags
}
