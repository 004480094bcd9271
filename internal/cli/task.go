package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// The exit codes of the task command when the task was not submitted (0
// when it was; 2 for a usage error, as for every command).
const (
	exitFailed    = 1
	exitCancelled = 3
)

// taskOutput is what the task command prints: the outcome as JSON.
type taskOutput struct {
	Status    host.OutcomeStatus `json:"status"`
	Value     json.RawMessage    `json:"value"`
	Reason    string             `json:"reason"`
	Usage     ledger.Usage       `json:"usage"`
	Cost      float64            `json:"cost"`
	SessionID string             `json:"session_id"`
	RunID     string             `json:"run_id,omitempty"`
}

// task runs one task and prints its outcome. Exit status: 0 submitted, 1
// failed, 3 cancelled (by the model, or by Ctrl-C), 2 for a usage error.
// The task's session is kept in --storage, so that "transcript" (and
// "transcript --usage") can read it afterwards.
func task(ctx context.Context, args []string, env Env) error {
	fs := newFlags("task", env)
	var m modelFlags
	m.register(fs, env)
	// A task's session defaults to a new one, not chat's "cli".
	sf := fs.Lookup("session")
	sf.DefValue, sf.Usage = "", "session `ID` (default: a new session task-<id>)"
	prompt := fs.String("prompt", "", "the task, as the user message (required)")
	schemaFile := fs.String("schema", "", "`FILE` holding the JSON Schema of the deliverable (required)")
	name := fs.String("name", "", "the deliverable's `NAME`, as the model is told (default \"deliverable\")")
	description := fs.String("description", "", "what the deliverable is, as the model is told")
	validatorFlag := fs.String("validator", "", "check the deliverable with the validator of a Wasm plugin: `FILE.wasm[:NAME]` (NAME may be left out when the plugin has one validator); the schema still shapes submit_deliverable")
	maxPokes := fs.Int("max-pokes", host.DefaultMaxPokes, "nudges for a model that stops without submitting (-1: none)")
	var attach pluginList
	fs.Var(&attach, "attach", "send `FILE` (a document, an image, audio) with the prompt (repeatable)")
	resume := fs.Bool("resume", false, "resume the interrupted task of --session (its process died), or read the outcome of its last task, and print it (give the same --validator)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: agentic-host task --prompt TEXT --schema FILE.json [--validator PLUGIN.wasm[:NAME]] [flags]
       agentic-host task --resume --session ID [--validator PLUGIN.wasm[:NAME]] [flags]

Run a task: the model works until it calls submit_deliverable with a value
valid against the schema (or cancel_task). The outcome is printed as JSON:
{"status", "value", "reason", "usage", "cost", "session_id", "run_id"}.
Exit status: 0 submitted, 1 failed, 3 cancelled, 2 usage error.
Without --session, the task runs in a new session "task-<id>". A task whose
process died goes on with --resume (or under chat --auto-resume), as the
same task; --resume then prints its outcome.

Flags:
`)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fail(2, "unexpected arguments %q: the task goes in --prompt", pos)
	}
	session := ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "session" {
			session = m.session
		}
	})
	var (
		validator     host.Validator
		validatorName string
	)
	if *validatorFlag != "" {
		log, err := newLogger(fs, env)
		if err != nil {
			return err
		}
		v, closeV, err := loadValidator(*validatorFlag, log)
		if err != nil {
			return fail(2, "--validator: %v", err)
		}
		defer closeV()
		// Named after the flag, so that --resume with the same flag finds
		// it again.
		validator, validatorName = v, *validatorFlag
		m.validators = map[string]host.Validator{validatorName: v}
	}
	if *resume {
		if session == "" || *prompt != "" || *schemaFile != "" {
			fs.Usage()
			return fail(2, "--resume needs --session, and takes no --prompt or --schema (the ledger has them)")
		}
		return resumeTask(ctx, m, session, env)
	}
	if *prompt == "" || *schemaFile == "" {
		fs.Usage()
		return fail(2, "--prompt and --schema are required")
	}
	schema, err := os.ReadFile(*schemaFile)
	if err != nil {
		return fail(2, "--schema: %v", err)
	}
	if !json.Valid(schema) {
		return fail(2, "--schema: %s is not valid JSON", *schemaFile)
	}
	if _, err := host.SchemaValidator(schema); err != nil {
		return fail(2, "--schema: %v", err)
	}
	h, ctx, cleanup, err := m.taskHost(ctx, env)
	if err != nil {
		return err
	}
	defer cleanup()
	var parts []ledger.Part
	for _, path := range attach {
		p, err := readAttachment(path)
		if err != nil {
			return fail(2, "%v", err)
		}
		parts = append(parts, p)
	}
	out := h.Task(ctx, host.TaskSpec{
		Prompt:        *prompt,
		Parts:         parts,
		Deliverable:   host.Deliverable{Name: *name, Description: *description, Schema: schema},
		SessionID:     session,
		MaxPokes:      *maxPokes,
		Validator:     validator,
		ValidatorName: validatorName,
		// A call that needs a person makes the task wait: say how to
		// decide it.
		OnProgress: func(p host.Progress) {
			if p.Type == host.ProgressApprovalRequested {
				fmt.Fprintf(env.Stderr, "the task waits for approval of %s\ndecide with: agentic-host approve %s %s  (or: agentic-host deny %s %s --reason WHY)\n",
					waitingLine(host.PendingApproval{ApprovalID: p.Approval.ApprovalID, Tool: p.Approval.Tool, Input: p.Approval.Input, Summary: p.Approval.Summary}),
					p.SessionID, p.Approval.ApprovalID, p.SessionID, p.Approval.ApprovalID)
			}
		},
	})
	return printOutcome(out, env)
}

// resumeTask resumes the session's interrupted task run, if it has one, and
// prints the outcome of its last task run.
func resumeTask(ctx context.Context, m modelFlags, session string, env Env) error {
	h, ctx, cleanup, err := m.taskHost(ctx, env)
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := h.Resume(ctx, session); err != nil && !errors.Is(err, host.ErrNothingToResume) {
		return fail(1, "resuming session %s: %v", session, err)
	}
	out, ok, err := h.Session(session).TaskOutcome(ctx, "")
	if err != nil {
		return fail(1, "reading session %s: %v", session, err)
	}
	if !ok {
		return fail(1, "session %s has no task that ended (none was started there, or its run is still going on)", session)
	}
	return printOutcome(out, env)
}

// taskHost sets the host up for a task, with a context that Ctrl-C (or
// SIGTERM) cancels: the task is then cancelled, durably.
func (m *modelFlags) taskHost(ctx context.Context, env Env) (*host.Host, context.Context, func(), error) {
	h, cleanup, err := m.setup(env)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	return h, ctx, func() { stop(); cleanup() }, nil
}

// printOutcome prints a task's outcome as JSON and returns the exit status
// it calls for.
func printOutcome(out host.Outcome, env Env) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(taskOutput{Status: out.Status, Value: out.Value, Reason: out.Reason, Usage: out.Usage,
		Cost: out.Cost, SessionID: out.SessionID, RunID: out.RunID}); err != nil {
		return err
	}
	switch out.Status {
	case host.OutcomeSubmitted:
		return nil
	case host.OutcomeCancelled:
		return &exitError{code: exitCancelled}
	default:
		return &exitError{code: exitFailed}
	}
}
