// Package hosttest helps test agents and the code built on package host: a
// scripted model that runs in process ([Model]: no network, no provider), a
// harness that builds a host over a memory store ([New]), helpers that
// read ledgers in tests ([Kinds], [WaitLedger], …), and streaming fixtures
// for UI tests: a run's progress recorded with stable ids and virtual
// times ([RecordStream], [Stream]), played on a virtual clock ([Clock]).
//
// A test scripts the model's replies — text, tool calls, failures — or lets
// it behave like a small agent: it calls a tool the request offers when the
// user names it, answers with a tool's result, and otherwise echoes.
package hosttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
)

// Reply is what a [Model] answers to one model call.
type Reply struct {
	// Text is the answer, streamed a word at a time. Default: none.
	Text string
	// Reasoning is streamed, a word at a time, before Text. Default: none.
	Reasoning string
	// ToolCalls are the calls the model makes, in order; their ids are
	// minted ("call_<n>"). Default: none.
	ToolCalls []ToolCall
	// Err, when set, fails the call once Text and Reasoning streamed, as a
	// provider failure would (model.ErrStalled, a *model.Error, …):
	// the host classifies it, and retries it when it is transient.
	// Default: nil.
	Err error
	// Usage is the usage the call reports. Default: nil, an estimate (about
	// four bytes a token, no cost).
	Usage *ledger.Usage
	// FinishReason is the finish reason the call reports ("length",
	// "content_filter", …). Default: "", which means "tool_calls" with
	// tool calls, else "stop".
	FinishReason string
	// Wait is a silence before the first word, as of a model slow to
	// answer; the call's context cuts it. Default: 0, none.
	Wait time.Duration
	// Stall is a silence once the words streamed, before the call ends, as
	// of a stream that hangs; the call's context cuts it. Default: 0,
	// none.
	Stall time.Duration
}

// ToolCall is a call a [Reply] makes.
type ToolCall struct {
	// Name is the tool's name.
	Name string
	// Arguments is the JSON of the arguments. Default: "{}".
	Arguments string
}

// Model is a scripted host.Model that runs in process. Each call takes the
// next reply of the script; once the script is spent, Respond answers, or
// else [DefaultReply]. It records every request. It is safe for concurrent
// use. The zero value is a usable model with an empty script.
type Model struct {
	// Respond answers the calls the script does not. Default: nil, which
	// means DefaultReply.
	Respond func(model.Request) Reply
	// Delay is the pause before each streamed word, to give a test time to
	// act while a pass streams. Default: 0, none.
	Delay time.Duration

	mu       sync.Mutex
	script   []Reply
	requests []model.Request
	calls    int
}

// NewModel returns a Model that answers with script, then as DefaultReply.
func NewModel(script ...Reply) *Model {
	return &Model{script: append([]Reply(nil), script...)}
}

// Enqueue appends replies to the script.
func (m *Model) Enqueue(replies ...Reply) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = append(m.script, replies...)
}

// Requests returns the requests the model received, in order.
func (m *Model) Requests() []model.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]model.Request(nil), m.requests...)
}

// RequestCount returns the number of requests the model received.
func (m *Model) RequestCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// Stream answers req with the next reply, streaming its reasoning and text
// to onDelta a word at a time, and its tool calls; ctx's end cuts it short.
func (m *Model) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta)) (model.Result, error) {
	m.mu.Lock()
	m.requests = append(m.requests, req)
	var reply Reply
	if len(m.script) > 0 {
		reply, m.script = m.script[0], m.script[1:]
		m.mu.Unlock()
	} else {
		respond := m.Respond
		m.mu.Unlock()
		if respond == nil {
			respond = DefaultReply
		}
		reply = respond(req)
	}
	res := model.Result{Model: req.Model, FinishReason: "stop"}
	pause := func(d time.Duration) error {
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := pause(reply.Wait); err != nil {
		return res, err
	}
	emit := func(kind model.DeltaKind, text string, into *string) error {
		for _, w := range strings.SplitAfter(text, " ") {
			if w == "" {
				continue
			}
			if m.Delay > 0 {
				t := time.NewTimer(m.Delay)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			*into += w
			if onDelta != nil {
				onDelta(model.Delta{Kind: kind, Text: w})
			}
		}
		return nil
	}
	if err := emit(model.DeltaReasoning, reply.Reasoning, &res.Reasoning); err != nil {
		return res, err
	}
	if err := emit(model.DeltaText, reply.Text, &res.Text); err != nil {
		return res, err
	}
	if err := pause(reply.Stall); err != nil {
		return res, err
	}
	if reply.Err != nil {
		return res, reply.Err
	}
	for _, c := range reply.ToolCalls {
		m.mu.Lock()
		m.calls++
		id := fmt.Sprintf("call_%d", m.calls)
		m.mu.Unlock()
		args := c.Arguments
		if args == "" {
			args = "{}"
		}
		res.ToolCalls = append(res.ToolCalls, ledger.ToolCall{ID: id, Name: c.Name, Arguments: args})
		if onDelta != nil {
			onDelta(model.Delta{Kind: model.DeltaToolCall, Text: args, ToolIndex: len(res.ToolCalls) - 1, ToolCallID: id, ToolName: c.Name})
		}
	}
	if len(res.ToolCalls) > 0 {
		res.FinishReason = "tool_calls"
	}
	if reply.FinishReason != "" {
		res.FinishReason = reply.FinishReason
	}
	if reply.Usage != nil {
		res.Usage = *reply.Usage
	} else {
		res.Usage = estimate(req, res)
	}
	return res, nil
}

// estimate makes up a usage for a call: about four bytes a token.
func estimate(req model.Request, res model.Result) ledger.Usage {
	prompt := len(req.System)
	for _, msg := range req.Messages {
		prompt += len(msg.Text())
		for _, c := range msg.ToolCalls {
			prompt += len(c.Name) + len(c.Arguments)
		}
	}
	completion := len(res.Text) + len(res.Reasoning)
	for _, c := range res.ToolCalls {
		completion += len(c.Name) + len(c.Arguments)
	}
	u := ledger.Usage{PromptTokens: int64(prompt+3) / 4, CompletionTokens: int64(completion+3) / 4}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// DefaultReply is how a [Model] answers when nothing is scripted: a
// deterministic imitation of an agent model.
//
//  1. When the conversation ends with tool results, it answers "The <tool>
//     tool returned: <output>", a line per result.
//  2. Else, when the last user message names tools the request offers, it
//     calls them, in order of mention, with arguments taken from the
//     message ("city=Paris", "city: Paris", "city is Paris") where the
//     tool's JSON Schema asks for them, and placeholders otherwise.
//  3. Else it echoes: "You said: <last user text>".
func DefaultReply(req model.Request) Reply {
	fr := fakemodel.Request{Model: req.Model}
	for _, t := range req.Tools {
		fr.Tools = append(fr.Tools, fakemodel.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	for _, msg := range req.Messages {
		fm := fakemodel.Message{Role: string(msg.Role), Text: msg.Text(), ToolCallID: msg.ToolCallID, Name: msg.Name}
		for _, c := range msg.ToolCalls {
			fm.ToolCalls = append(fm.ToolCalls, fakemodel.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		fr.Messages = append(fr.Messages, fm)
	}
	r := fakemodel.DefaultReply(fr)
	out := Reply{Text: r.Text, Reasoning: r.Reasoning}
	for _, c := range r.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{Name: c.Name, Arguments: c.Arguments})
	}
	return out
}

// StallingModel returns a Model that, to a call whose last message is a
// user's beginning with prefix ("" for every call), streams text and then
// nothing until the call is cut (its context ends: a cancel, an
// interrupt, a timeout); it answers the other calls as [DefaultReply]. It
// holds a run mid-pass for as long as a test needs, without a clock.
func StallingModel(prefix, text string) *Model {
	m := NewModel()
	m.Respond = func(req model.Request) Reply {
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == ledger.RoleUser && strings.HasPrefix(req.Messages[n-1].Text(), prefix) {
			return Reply{Text: text, Stall: 24 * time.Hour}
		}
		return DefaultReply(req)
	}
	return m
}
