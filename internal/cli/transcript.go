package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

func transcript(ctx context.Context, args []string, env Env) error {
	fs := newFlags("transcript", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	usageOnly := fs.Bool("usage", false, "print the session's usage instead: tokens and billed cost (USD), per run and in total")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host transcript [flags] SESSION\n\nPrint the session's transcript as JSON (with --usage, its usage and cost).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fail(2, "want exactly one SESSION, got %d arguments", len(pos))
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	id := pos[0]
	if !storage.ValidSessionID(id) {
		return fail(2, "invalid session id %q", id)
	}
	store, closeStore, err := openStorage(*storageURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	events, err := store.Load(ctx, id)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fail(1, "no session %s in %s", id, *storageURL)
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if *usageOnly {
		return enc.Encode(ledger.UsageOf(events))
	}
	// No run of this process is live: an open run in the ledger shows as
	// interrupted.
	t := ledger.WireTranscript(ledger.ProjectSession(id, events))
	return enc.Encode(t)
}
