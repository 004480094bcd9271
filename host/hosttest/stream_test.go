package hosttest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/host/model"
)

// TestRecordStream: a recorded stream is the same every time (stable ids,
// virtual times), holds the run's progress in order, and plays on a
// virtual clock: each event once the clock reaches its time, none before.
func TestRecordStream(t *testing.T) {
	ctx := context.Background()
	weather := host.NewTool(host.ToolSpec{Name: "get_weather"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "sunny"}, nil
	})
	spec := hosttest.StreamSpec{Message: "weather?", Tools: []host.Tool{weather}, Pace: 10 * time.Millisecond, Replies: []hosttest.Reply{
		{Text: "Let me", Err: model.ErrStalled},
		{Text: "Let me look.", ToolCalls: []hosttest.ToolCall{{Name: "get_weather"}}},
		{Text: "It is sunny."},
	}}
	a, err := hosttest.RecordStream(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hosttest.RecordStream(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("two recordings differ:\n%s\n%s", ja, jb)
	}
	var kinds []string
	for i, e := range a.Events {
		kinds = append(kinds, string(e.Progress.Type))
		if e.At != time.Duration(i+1)*spec.Pace || e.Progress.RunID != "run_1" {
			t.Errorf("event %d at %s of run %s", i, e.At, e.Progress.RunID)
		}
	}
	if got, want := strings.Join(kinds, " "), "response-start text text retry text text text tool-start tool-end response-start text text text run-end"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if a.Final.Status.State != host.StateCompleted || len(a.Final.Transcript.Items) != 3 || a.Final.Transcript.Items[2].Text != "It is sunny." {
		t.Errorf("final %+v", a.Final)
	}
	if u := a.Updates(); u[0].Snapshot == nil || u[len(u)-1].Snapshot == nil || len(u) != len(a.Events)+2 {
		t.Errorf("updates %d", len(u))
	}

	clock := hosttest.NewClock()
	type seen struct {
		at time.Duration
		p  host.Progress
	}
	played := make(chan seen, len(a.Events))
	done := make(chan error, 1)
	go func() {
		done <- a.Play(ctx, clock, func(p host.Progress) { played <- seen{clock.Now(), p} })
	}()
	for _, e := range a.Events {
		clock.Advance(spec.Pace)
		s := <-played
		if s.at != e.At || s.p.Seq != e.Progress.Seq {
			t.Errorf("played event %d at %s, want %d at %s", s.p.Seq, s.at, e.Progress.Seq, e.At)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
