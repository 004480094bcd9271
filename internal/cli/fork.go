package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// forkCmd implements "agentic-host fork SESSION --at POINT": it makes a new
// session from SESSION's ledger up to POINT (host.Host.Fork), and runs it
// here, streaming it as chat does.
func forkCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("fork", env)
	var m modelFlags
	m.register(fs, env)
	at := fs.String("at", "", "the fork `POINT`: a user message's id or a response's id, as the transcript shows them (or an input or step event's id)")
	text := fs.String("text", "", "with --at a user message: answer this `TEXT` instead of the message's")
	agentName := fs.String("agent", "", "the `NAME` the fork's agent is recorded under (default: the source's agent, unnamed)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host fork --at POINT [flags] SESSION\n\n"+
			"Make a new session from SESSION's ledger up to POINT, and run it here,\n"+
			"streaming it as chat does. At a user message, the fork answers it anew\n"+
			"(--text replaces it); at a response (a step), the fork goes on after it,\n"+
			"with its recorded tool results: no tool that completed runs again.\n"+
			"SESSION is untouched. --session names the fork (default: a new id,\n"+
			"printed on stderr); --model runs it with another model. The fork's\n"+
			"transcript names its source (forked_from).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	m.session, fs.Lookup("session").DefValue = "", "" // a new id
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fail(2, "want exactly one SESSION, got %d arguments", len(pos))
	}
	if *at == "" {
		fs.Usage()
		return fail(2, "--at POINT is required")
	}
	if !storage.ValidSessionID(pos[0]) {
		return fail(2, "invalid session id %q", pos[0])
	}
	if m.session != "" && !storage.ValidSessionID(m.session) {
		return fail(2, "invalid --session %q", m.session)
	}
	h, cleanup, err := m.setup(env)
	if err != nil {
		return err
	}
	defer cleanup()
	opts := host.ForkOptions{Source: pos[0], At: *at, SessionID: m.session, Text: *text}
	if m.modelSet || *agentName != "" {
		a := m.agent
		a.Name = *agentName
		opts.Agent = &a
	}
	run, err := h.Fork(ctx, opts)
	switch {
	case errors.Is(err, host.ErrSessionNotFound):
		return fail(1, "no session %s in %s", pos[0], m.storage)
	case errors.Is(err, ledger.ErrForkPointNotFound), errors.Is(err, ledger.ErrForkPointUnfinished),
		errors.Is(err, host.ErrSessionExists), errors.Is(err, host.ErrInvalidInput):
		return fail(2, "%v", err)
	case err != nil:
		return fail(1, "%v", err)
	}
	fmt.Fprintf(env.Stderr, "forked %s at %s into session %s\n", pos[0], *at, run.SessionID())
	res, err := follow(ctx, run, &printer{w: env.Stdout})
	if err == nil && res.Status == ledger.RunApprovalRequired {
		tellParked(env.Stderr, run.SessionID(), res)
	}
	return outcome(res, err)
}
