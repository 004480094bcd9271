// Command onhost holds the same conversation as byhand, on the host:
// retries, the ledger and the resume of a run a crash cut are the host's.
// Run it with -crash-at 2, then again.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/agentichost/agentic/examples/beforeafter"
	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

func main() {
	dir := flag.String("dir", ".onhost", "where the ledger is kept")
	crashAt := flag.Int("crash-at", 0, "die once question N is accepted, before its answer")
	flag.Parse()
	model, err := beforeafter.FlakyModel()
	if err != nil {
		fail(err)
	}
	defer model.Close()
	store, err := file.Open(*dir, file.Options{})
	if err != nil {
		fail(err)
	}
	client, err := provider.New(provider.Config{BaseURL: model.URL()})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	h, err := host.New(host.Options{Storage: store, Model: client, Agent: host.Agent{Model: "fake/echo"},
		// A run a crash cut is resumed at start.
		AutoResume: &host.AutoResume{OnResumed: func(_ string, res host.RunResult, _ error) { fmt.Println("(resumed)", res.Text) }},
		OnEvent: func(e host.Event) {
			if e.Type == host.EventRetry {
				fmt.Printf("[retrying in %dms]\n", e.Retry.DelayMS)
			}
		}})
	if err != nil {
		fail(err)
	}
	defer h.Close(ctx)
	<-h.SweepDone()

	sess := h.Session("demo")
	tr, err := sess.Transcript(ctx)
	if err != nil {
		fail(err)
	}
	var asked []string
	for _, it := range tr.Items {
		if it.Kind == ledger.ItemUser {
			asked = append(asked, it.Text)
		}
	}
	for i, q := range beforeafter.Conversation {
		if slices.Contains(asked, q) {
			continue
		}
		if i+1 == *crashAt {
			if _, err := sess.Start(ctx, q, host.StartOptions{}); err != nil {
				fail(err)
			}
			fmt.Println("[crash]")
			os.Exit(1)
		}
		res, err := sess.Send(ctx, q, host.SendOptions{})
		if err != nil {
			fail(err)
		}
		fmt.Println(res.Text)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "onhost:", err)
	os.Exit(1)
}
