package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// TestSendOnPart: SendOptions.OnPart gets the provider's raw stream, chunk
// by chunk, verbatim (chat.completion.chunk JSON whose content deltas make
// the answer), named by run, response, model and attempt; a send without
// it gets nothing, and another sender's listener ends with its send.
func TestSendOnPart(t *testing.T) {
	hs := newHarness(t, fakemodel.Options{ChunkSize: 3}, host.Agent{})
	ctx := context.Background()
	var parts []host.ModelPart
	res, err := hs.host.Session("p").Send(ctx, "hello there", host.SendOptions{OnPart: func(p host.ModelPart) { parts = append(parts, p) }})
	if err != nil || res.Status != ledger.RunCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if len(parts) < 3 {
		t.Fatalf("%d raw parts, want the stream's chunks", len(parts))
	}
	var text strings.Builder
	for _, p := range parts {
		var ch struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(p.Raw, &ch); err != nil || ch.Object != "chat.completion.chunk" {
			t.Fatalf("a raw part that is no chunk: %s (%v)", p.Raw, err)
		}
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
		if p.RunID != res.RunID || p.ResponseID != res.ResponseID || p.Model != "fake/echo" || p.Attempt != 1 {
			t.Fatalf("a raw part named %+v, want run %s, response %s", p, res.RunID, res.ResponseID)
		}
	}
	if text.String() != res.Text {
		t.Fatalf("the raw chunks' content %q, the answer %q", text.String(), res.Text)
	}
	n := len(parts)
	if _, err := hs.host.Session("p").Send(ctx, "again", host.SendOptions{}); err != nil || len(parts) != n {
		t.Fatalf("a send without OnPart: %v, %d more parts", err, len(parts)-n)
	}
}

// TestRawChunksOnlyWhileListened: the model is asked for its raw chunks
// (model.Request.RawChunks) only for a pass someone listens to with
// OnPart, so that a pass nobody asks it of keeps none.
func TestRawChunksOnlyWhileListened(t *testing.T) {
	m := hosttest.NewModel()
	hs := hosttest.New(t, host.Options{Storage: memory.New(), Model: m, Agent: host.Agent{Model: hosttest.DefaultModel}})
	ctx := context.Background()
	if _, err := hs.Host.Session("quiet").Send(ctx, "hello", host.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Host.Session("heard").Send(ctx, "hello", host.SendOptions{OnPart: func(host.ModelPart) {}}); err != nil {
		t.Fatal(err)
	}
	reqs := m.Requests()
	if len(reqs) != 2 || reqs[0].RawChunks || !reqs[1].RawChunks {
		t.Errorf("RawChunks asked of %d passes: %v; want the listened pass's alone", len(reqs), []bool{reqs[0].RawChunks, reqs[len(reqs)-1].RawChunks})
	}
}
