package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// exitApproval is the exit status of a command whose run waits for a
// person's approval.
const exitApproval = 3

// approvalSecret is the key of approval tokens: $AGENTIC_APPROVAL_SECRET
// (hex or text, at least 32 bytes), else one the storage keeps (made on
// first use), so that every process on the storage shares it.
func approvalSecret(env Env, store storage.Storage) ([]byte, error) {
	if s := env.Getenv("AGENTIC_APPROVAL_SECRET"); s != "" {
		if b, err := hex.DecodeString(s); err == nil && len(b) >= 32 {
			return b, nil
		}
		if len(s) < 32 {
			return nil, errors.New("AGENTIC_APPROVAL_SECRET has fewer than 32 bytes")
		}
		return []byte(s), nil
	}
	kv, ok := store.(storage.KV)
	if !ok {
		return nil, nil // the host makes one for its life
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const ns, key = "host", "approval-secret"
	if b, ok, err := kv.Get(ctx, ns, key); err != nil || ok {
		return b, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := kv.Set(ctx, ns, key, b); err != nil {
		return nil, err
	}
	// Two processes may have made one at once: both use the one kept.
	b, _, err := kv.Get(ctx, ns, key)
	return b, err
}

// waitingLine describes an approval request on one line.
func waitingLine(p host.PendingApproval) string {
	what := p.Summary
	if what == "" {
		what = p.Tool + " " + string(p.Input)
	}
	return fmt.Sprintf("%s  %s  %s", p.ApprovalID, p.Tool, oneLine(what, 200))
}

// tellParked says, on w, what a parked run waits for and how to decide.
func tellParked(w io.Writer, session string, res host.RunResult) {
	fmt.Fprintf(w, "run %s waits for approval:\n", res.RunID)
	for _, p := range res.Approvals {
		fmt.Fprintf(w, "  %s\n", waitingLine(p))
	}
	if len(res.Approvals) > 0 {
		fmt.Fprintf(w, "decide with: agentic-host approve %s %s  (or: agentic-host deny %s %s --reason WHY)\n",
			session, res.Approvals[0].ApprovalID, session, res.Approvals[0].ApprovalID)
	}
}

// follow streams a run's progress to p until it ends, and returns its
// result.
func follow(ctx context.Context, run *host.Run, p *printer) (host.RunResult, error) {
	sub := run.Subscribe(0)
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			break // the end (io.EOF), or the caller gave up: Wait says which
		}
		p.progress(ev)
	}
	p.finish()
	return run.Wait(ctx)
}

// approvalsCmd implements "agentic-host approvals": the inbox of pending
// approval requests of every session in the storage.
func approvalsCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("approvals", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	asJSON := fs.Bool("json", false, "print JSON (with each request's token)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host approvals [flags]\n\nList the tool calls waiting for a person's approval, in every session of\nthe storage, oldest first. Decide one with agentic-host approve|deny.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fail(2, "unexpected arguments %q", pos)
	}
	store, closeStore, err := openStorage(*storageURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	secret, err := approvalSecret(env, store)
	if err != nil {
		return fail(1, "%v", err)
	}
	// Listing runs no model.
	logger, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	h, err := host.New(host.Options{Storage: store, Model: noModel{}, Agent: host.Agent{Model: "none"}, ApprovalSecret: secret,
		Logger: logger})
	if err != nil {
		return fail(1, "%v", err)
	}
	defer h.Close(context.Background())
	pending, err := h.PendingApprovals(ctx)
	if err != nil {
		return fail(1, "%v", err)
	}
	if *asJSON {
		if pending == nil {
			pending = []host.PendingApproval{}
		}
		return pluginPrintJSON(env, pending)
	}
	if len(pending) == 0 {
		fmt.Fprintln(env.Stdout, "no approval requests waiting")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAPPROVAL\tTOOL\tWAITING\tEXPIRES IN\tSUMMARY")
	now := time.Now()
	for _, p := range pending {
		summary := p.Summary
		if summary == "" {
			summary = string(p.Input)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.SessionID, p.ApprovalID, p.Tool, now.Sub(p.RequestedAt).Round(time.Second),
			p.ExpiresAt.Sub(now).Round(time.Minute), oneLine(summary, 120))
	}
	return tw.Flush()
}

// decideCmd implements "agentic-host approve|deny SESSION APPROVAL_ID"
// and "agentic-host respond SESSION APPROVAL_ID TEXT": it decides, then
// continues the run as chat would, streaming it.
func decideCmd(ctx context.Context, verb string, args []string, env Env) error {
	fs := newFlags(verb, env)
	var m modelFlags
	m.register(fs, env)
	reason := fs.String("reason", "", "why (the model is told a denial's reason)")
	by := fs.String("by", env.Getenv("USER"), "who decides, as the ledger records it")
	var inputFile *string
	if verb == "approve" {
		inputFile = fs.String("input", "", "run the call with the JSON object in `FILE` (- for stdin) instead of the model's input: an edit, checked against the tool's schema")
	}
	want, usage := 2, "SESSION APPROVAL_ID"
	if verb == "respond" {
		want, usage = 3, "SESSION APPROVAL_ID TEXT"
	}
	fs.Usage = func() {
		what := "Decide a tool call that waits for approval"
		if verb == "respond" {
			what = "Answer a tool call that waits for approval with TEXT, in the tool's\nplace (the tool does not run; the model reads TEXT as its result)"
		}
		fmt.Fprintf(fs.Output(), "Usage: agentic-host %s [flags] %s\n\n"+
			"%s, then continue its run here,\n"+
			"streaming it as chat does (give the model and plugin flags chat had).\n"+
			"Exit status: 0 the run completed, %d it waits for another approval.\n\nFlags:\n", verb, usage, what, exitApproval)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != want {
		fs.Usage()
		return fail(2, "want %s", usage)
	}
	d := host.ApprovalDecision{Approve: verb == "approve", Reason: *reason, By: *by}
	if verb == "respond" {
		if strings.TrimSpace(pos[2]) == "" {
			return fail(2, "TEXT is empty: the model would read nothing as the call's result")
		}
		d.Response = pos[2]
	}
	if inputFile != nil && *inputFile != "" {
		var data []byte
		if *inputFile == "-" {
			data, err = io.ReadAll(env.Stdin)
		} else {
			data, err = os.ReadFile(*inputFile)
		}
		if err != nil {
			return fail(2, "--input: %v", err)
		}
		if !json.Valid(data) {
			return fail(2, "--input %s: not JSON", *inputFile)
		}
		d.Input = json.RawMessage(data)
	}
	h, cleanup, err := m.setup(env)
	if err != nil {
		return err
	}
	defer cleanup()
	sess := h.Session(pos[0])
	run, err := sess.Decide(ctx, pos[1], d)
	if errors.Is(err, host.ErrApprovalExpired) {
		fmt.Fprintf(env.Stderr, "the request had expired: the decision did not count; the call was refused as expired, and the run goes on\n")
	} else if errors.Is(err, host.ErrInvalidDecision) {
		return fail(2, "%v", err)
	} else if err != nil {
		return fail(1, "%v", err)
	}
	res, err := follow(ctx, run, &printer{w: env.Stdout})
	if err == nil && res.Status == ledger.RunApprovalRequired {
		tellParked(env.Stderr, pos[0], res)
	}
	return outcome(res, err)
}

// noModel is the model of a host that runs nothing.
type noModel struct{}

func (noModel) Stream(context.Context, model.Request, func(model.Delta)) (model.Result, error) {
	return model.Result{}, errors.New("this command runs no model")
}

// askApproval asks, on the terminal, about each call a parked run waits
// on, and decides it: "y" or "yes" approves, "", "n" or "no" denies, and
// any other answer denies with that answer as the reason (the model is
// told it). It returns the handle of the run that continues, or nil when
// the input ended (or Ctrl-C came) before every call was decided: a call
// not answered then is not decided, and waits as before.
func askApproval(ctx context.Context, sess *host.Session, res host.RunResult, readLine func() (string, bool), env Env) (*host.Run, error) {
	var run *host.Run
	for _, p := range res.Approvals {
		fmt.Fprintf(env.Stdout, "approve %s %s? [y/N/reason] ", p.Tool, oneLine(string(p.Input), 300))
		line, ok := readLine()
		if !ok {
			fmt.Fprintln(env.Stdout)
			return nil, nil
		}
		line = strings.TrimSpace(line)
		d := host.ApprovalDecision{By: env.Getenv("USER")}
		switch strings.ToLower(line) {
		case "y", "yes":
			d.Approve = true
		case "", "n", "no":
		default:
			d.Reason = line
		}
		r, err := sess.Decide(ctx, p.ApprovalID, d)
		if errors.Is(err, host.ErrApprovalExpired) {
			fmt.Fprintf(env.Stdout, "[approval %s had expired: the answer did not count, and the call was refused as expired]\n", p.ApprovalID)
		} else if err != nil {
			return nil, err
		}
		run = r
	}
	return run, nil
}
