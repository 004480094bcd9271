package storagetest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// base is the time of the first event [EveryKind] makes. It has
// nanoseconds so that a store which rounds times is caught.
var base = time.Date(2025, time.June, 1, 12, 0, 0, 123456789, time.UTC)

// EveryKind returns one valid event of each kind in [ledger.Kinds], in that
// order, all belonging to the run runID, with every field of every body set:
// ids, texts with escapes and non-ASCII runes, usage with every counter and
// cost, raw JSON payloads, an input whose image, audio and file parts
// carry binary data (bytes including 0x00 and invalid UTF-8) and a part
// and a tool output kept by reference to a blob.
//
// Ids are "<runID>-<nn>-<kind>", times are in UTC with nanoseconds and
// strictly increasing. The result is deterministic for a given runID (the
// binary data is pseudo-random, seeded by runID), so two calls with the same
// runID return equal values; every call returns fresh values, which the
// caller may modify. Raw JSON is compact, the only form the ledger codec
// round-trips byte for byte.
//
// Use it to exercise a store, a projection or a transport with events that
// look like the ones the host writes.
func EveryKind(runID string) []ledger.Event {
	h := fnv.New64a()
	h.Write([]byte(runID))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x5eed))
	binary := func(n int) []byte {
		// Always a NUL, bytes that are not UTF-8, and an overlong
		// encoding, then noise.
		b := []byte{0x00, 0xff, 0xfe, 0xc3, 0x28, 0xc0, 0x80, 0xed, 0xa0, 0x80}
		for len(b) < n {
			b = append(b, byte(rng.UintN(256)))
		}
		return b
	}
	byok := true

	kinds := ledger.Kinds()
	events := make([]ledger.Event, 0, len(kinds))
	for i, k := range kinds {
		e := ledger.Event{
			ID:    fmt.Sprintf("%s-%02d-%s", runID, i, k),
			Kind:  k,
			Time:  base.Add(time.Duration(i)*time.Second + time.Duration(i)*time.Nanosecond),
			RunID: runID,
		}
		switch k {
		case ledger.KindInput:
			e.Input = &ledger.Input{
				MessageID: runID + "-msg",
				RequestID: runID + "-req",
				Parts: []ledger.Part{
					ledger.TextPart("héllo <b>&amp;</b> \"quoted\" \\ back\nslash\ttab \u2028 \U0001F600 \x00 end"),
					{Type: ledger.PartImage, MIME: "image/png", Data: binary(96), URL: "https://example.com/a.png"},
					{Type: ledger.PartAudio, MIME: "audio/wav", Data: binary(200)},
					{Type: ledger.PartFile, MIME: "application/octet-stream", Data: binary(33), Name: "notes.bin", URL: "https://example.com/notes.bin"},
					{Type: ledger.PartImage, MIME: "image/jpeg", Name: "large.jpg", Blob: "sha256:" + fmt.Sprintf("%064x", rng.Uint64()), Size: 3 << 20},
				},
			}
		case ledger.KindRunStart:
			e.RunStart = &ledger.RunStart{
				Inputs:     []string{runID + "-msg", runID + "-msg2"},
				ResponseID: runID + "-resp0",
				Agent:      "default",
				Model:      "openai/gpt-4o-mini",
				MaxSteps:   25,
				Task: &ledger.TaskRun{Deliverable: "report", Description: "a <short> report",
					Schema:    json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`),
					Validator: "house-style", MaxPokes: 3},
			}
		case ledger.KindStep:
			e.Step = &ledger.Step{
				ResponseID:     runID + "-resp0",
				NextResponseID: runID + "-resp1",
				Index:          3,
				Inputs:         []string{runID + "-queued"},
				Text:           "Let me look that up. 日本語 — ünïcödé",
				Reasoning:      "The user wants the file; call read_file.",
				ToolCalls: []ledger.ToolCall{
					{ID: "call_1", Name: "read_file", Arguments: `{"path":"/etc/hosts"}`},
					{ID: "call_2", Name: "search", Arguments: `{"q": "unterminated`},
				},
				FinishReason: "tool_calls",
				Model:        "openai/gpt-4o-mini-2024-07-18",
				GenerationID: "gen-1234567890",
				Usage: ledger.Usage{
					PromptTokens:     1234,
					CompletionTokens: 56,
					TotalTokens:      1290,
					CachedTokens:     1000,
					CacheWriteTokens: 200,
					ReasoningTokens:  17,
					Cost:             0.00012345,
					IsBYOK:           &byok,
					UpstreamCost:     0.0009876,
				},
				Partial: true,
				Raw:     json.RawMessage(`{"reasoning_details":[{"type":"reasoning.text","text":"x","index":0}],"n":1.5e-7}`),
			}
		case ledger.KindToolStart:
			e.ToolStart = &ledger.ToolStart{CallID: "call_1", Name: "read_file", Effect: "external", Idempotent: true}
		case ledger.KindToolResult:
			e.ToolResult = &ledger.ToolResult{
				CallID:     "call_1",
				Name:       "read_file",
				Output:     "127.0.0.1 localhost\n::1 localhost\n",
				OutputBlob: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				OutputSize: 1 << 20,
				IsError:    true,
				Source:     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				DurationMS: 42,
				Synthetic:  true,
			}
		case ledger.KindApprovalRequest:
			e.ApprovalRequest = &ledger.ApprovalRequest{
				ApprovalID: runID + "-appr",
				CallID:     "call_2",
				Name:       "search",
				Input:      json.RawMessage(`{"q":"<script>&","n":[1,2,3],"ok":true,"none":null}`),
				Summary:    "search the web for <script>",
			}
		case ledger.KindApprovalDecision:
			e.ApprovalDecision = &ledger.ApprovalDecision{
				ApprovalID: runID + "-appr",
				Decision:   "deny",
				Reason:     "not on a Friday",
				By:         "user:alice",
			}
		case ledger.KindCompaction:
			e.Compaction = &ledger.Compaction{
				Summary:      "The user asked for the hosts file; it was read.",
				Through:      fmt.Sprintf("%s-%02d-%s", runID, 4, ledger.KindToolResult),
				PromptTokens: 120000,
				Usage:        ledger.Usage{PromptTokens: 120000, CompletionTokens: 800, TotalTokens: 120800, Cost: 0.25},
			}
		case ledger.KindPoke:
			e.Poke = &ledger.Poke{Text: "Please finish the task."}
		case ledger.KindRunEnd:
			e.RunEnd = &ledger.RunEnd{Status: ledger.RunFailed, Reason: "provider returned 502 three times", Inputs: []string{runID + "-queued2"}, RestartedBy: runID + "-next",
				Deliverable: json.RawMessage(`{"title":"Q3 <&> report"}`)}
		case ledger.KindResumeAttempt:
			e.ResumeAttempt = &ledger.ResumeAttempt{Attempt: 2, Host: "host-a:8080"}
		case ledger.KindRetry:
			e.Retry = &ledger.Retry{ResponseID: runID + "-resp-1", Attempt: 1, Reason: "HTTP 429 (rate limited): «slow down»", DelayMS: 2000}
		case ledger.KindFork:
			e.Fork = &ledger.Fork{Source: "source-session", At: runID + "-02-step", Item: runID + "-resp0", Copied: 7,
				Agent: "reviewer", Model: "anthropic/claude-sonnet-4.5 «candidate»"}
		case ledger.KindToolJournal:
			e.ToolJournal = &ledger.ToolJournal{CallID: runID + "-call1", Name: "http_steps", Source: "sha256:" + fmt.Sprintf("%064x", rng.Uint64()), At: 2,
				Entries: []ledger.JournalEntry{
					{Op: ledger.JournalHTTPSend, Request: "sha256:ab", What: "POST https://example.com/steps «1»", Key: "agentic-k1"},
					{Op: ledger.JournalHTTP, Request: "sha256:ab", Answer: []byte(`{"status":200,"body":"ok \u00e9"}`)},
					{Op: ledger.JournalKVGet, Request: "sha256:cd", What: "cache/key", Answer: binary(40)},
				}}
		default:
			// A kind this generator does not know yet: fail loudly in
			// the suite rather than silently skip it.
			panic(fmt.Sprintf("storagetest: EveryKind does not know kind %q", k))
		}
		events = append(events, e)
	}
	return events
}

// seqEvent returns a small valid event (a poke) whose id and text carry
// the session and a sequence number, for tests about order and isolation.
func seqEvent(session string, n int) ledger.Event {
	return ledger.Event{
		ID:    fmt.Sprintf("%s-%06d", session, n),
		Kind:  ledger.KindPoke,
		Time:  base.Add(time.Duration(n) * time.Microsecond),
		RunID: "run-" + session,
		Poke:  &ledger.Poke{Text: fmt.Sprintf("%s #%d", session, n)},
	}
}

// seqEvents returns seqEvent(session, from) … seqEvent(session, from+n-1).
func seqEvents(session string, from, n int) []ledger.Event {
	evs := make([]ledger.Event, n)
	for i := range evs {
		evs[i] = seqEvent(session, from+i)
	}
	return evs
}
