package eval_test

import (
	"context"
	"fmt"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/storage/memory"
)

// Run replays a recorded session against a candidate model: here a
// scripted one that answers the user's turn in other words.
func ExampleRun() {
	store := memory.New()
	h, err := host.New(host.Options{Storage: store, Model: hosttest.NewModel(), Agent: host.Agent{Model: "test/model"}})
	if err != nil {
		panic(err)
	}
	defer h.Close(context.Background())
	if _, err := h.Session("s1").Send(context.Background(), "hello", host.SendOptions{}); err != nil {
		panic(err)
	}

	candidate := hosttest.NewModel(hosttest.Reply{Text: "Hi! How can I help?"})
	rep, err := eval.Run(context.Background(), eval.Options{Source: store, Model: candidate,
		Agent: host.Agent{Model: "test/candidate"}, Sessions: []string{"s1"}})
	if err != nil {
		panic(err)
	}
	s := rep.Sessions[0]
	fmt.Println(s.Candidate.Status, s.Diverged, s.Divergence)
	fmt.Printf("%q → %q\n", s.Turns[0].RecordedText, s.Turns[0].CandidateText)
	// Output:
	// completed true turn 0: the answer differs
	// "You said: hello" → "Hi! How can I help?"
}
