package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// exitWaiting is the exit status of a command whose run parked with calls
// that wait for an event or a time.
const exitWaiting = 4

// waitsText names what a parked run's calls wait for.
func waitsText(waits []host.Waiting) string {
	var parts []string
	for _, w := range waits {
		if w.Event != "" {
			parts = append(parts, fmt.Sprintf("the event %q (%s)", w.Event, w.Name))
		} else {
			parts = append(parts, fmt.Sprintf("%s (%s)", w.Until.UTC().Format(time.RFC3339), w.Name))
		}
	}
	return strings.Join(parts, ", ")
}

// tellWaiting says what a parked run's calls wait for, and how to post an
// event.
func tellWaiting(w io.Writer, session string, res host.RunResult) {
	fmt.Fprintf(w, "run %s waits for %s; it holds nothing meanwhile\n", res.RunID, waitsText(res.Waits))
	for _, wt := range res.Waits {
		if wt.Event != "" {
			fmt.Fprintf(w, "post the event with: agentic-host event %s %s PAYLOAD  (or POST /v1/sessions/%s/events/%s)\n", session, wt.Event, session, wt.Event)
			break
		}
	}
}

// eventCmd implements "agentic-host event SESSION KEY [PAYLOAD]": it posts
// the event to the session and, when a call waiting for it takes it,
// continues its run here, streaming it as chat does.
func eventCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("event", env)
	var m modelFlags
	m.register(fs, env)
	file := fs.String("file", "", "read the payload from `FILE` (- for standard input) instead of the argument")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host event [flags] SESSION KEY [PAYLOAD]\n\n"+
			"Post the event KEY to the session, its payload PAYLOAD (or --file). A plugin's\n"+
			"call that waits for it continues its run here, streamed as chat does (give\n"+
			"the model and plugin flags chat had); when none waits yet, the event is kept\n"+
			"until the first wait for KEY in the session.\n"+
			"Exit status: 0 the run completed (or the event was kept), %d it waits for\n"+
			"approval, %d for another event or a time.\n\nFlags:\n", exitApproval, exitWaiting)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 || len(pos) > 3 || (len(pos) == 3 && *file != "") {
		fs.Usage()
		return fail(2, "want SESSION KEY and a PAYLOAD or --file")
	}
	var payload []byte
	switch {
	case *file == "-":
		payload, err = io.ReadAll(io.LimitReader(os.Stdin, host.MaxEventBytes+1))
	case *file != "":
		payload, err = os.ReadFile(*file)
	case len(pos) == 3:
		payload = []byte(pos[2])
	}
	if err != nil {
		return fail(1, "reading the payload: %v", err)
	}
	h, cleanup, err := m.setup(env)
	if err != nil {
		return err
	}
	defer cleanup()
	posted, err := h.Session(pos[0]).PostEvent(ctx, pos[1], payload)
	if err != nil {
		return fail(1, "%v", err)
	}
	if !posted.Taken {
		fmt.Fprintf(env.Stderr, "the event %q is kept: no call of session %s waits for it now; the first wait for it takes it\n", pos[1], pos[0])
		return nil
	}
	if posted.Run == nil {
		fmt.Fprintf(env.Stderr, "the event %q was taken by a call of session %s; its run goes on elsewhere\n", pos[1], pos[0])
		return nil
	}
	res, err := follow(ctx, posted.Run, &printer{w: env.Stdout})
	switch {
	case err == nil && res.Status == ledger.RunApprovalRequired:
		tellParked(env.Stderr, pos[0], res)
	case err == nil && res.Status == ledger.RunWaiting:
		tellWaiting(env.Stderr, pos[0], res)
	}
	return outcome(res, err)
}
