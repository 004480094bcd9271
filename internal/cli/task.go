package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/ledger"
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
	prompt := fs.String("prompt", "", "the task, as the user message (required)")
	schemaFile := fs.String("schema", "", "`FILE` holding the JSON Schema of the deliverable (required)")
	name := fs.String("name", "", "the deliverable's `NAME`, as the model is told (default \"deliverable\")")
	description := fs.String("description", "", "what the deliverable is, as the model is told")
	validatorFlag := fs.String("validator", "", "check the deliverable with the validator of a Wasm plugin: `FILE.wasm[:NAME]` (NAME may be left out when the plugin has one validator); the schema still shapes submit_deliverable")
	maxPokes := fs.Int("max-pokes", host.DefaultMaxPokes, "nudges for a model that stops without submitting (-1: none)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: agentic-host task --prompt TEXT --schema FILE.json [--validator PLUGIN.wasm[:NAME]] [flags]

Run a task: the model works until it calls submit_deliverable with a value
valid against the schema (or cancel_task). The outcome is printed as JSON:
{"status", "value", "reason", "usage", "cost", "session_id", "run_id"}.
Exit status: 0 submitted, 1 failed, 3 cancelled, 2 usage error.
Without --session, the task runs in a new session "task-<id>".

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fail(2, "unexpected arguments %q: the task goes in --prompt", fs.Args())
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
	session := ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "session" {
			session = m.session
		}
	})
	var validator host.Validator
	if *validatorFlag != "" {
		v, closeV, err := loadValidator(*validatorFlag, env)
		if err != nil {
			return fail(2, "--validator: %v", err)
		}
		defer closeV()
		validator = v
	}
	h, cleanup, err := m.setup(env)
	if err != nil {
		return err
	}
	defer cleanup()

	// Ctrl-C (or SIGTERM) cancels the task, durably.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := h.Task(ctx, host.TaskSpec{
		Prompt:      *prompt,
		Deliverable: host.Deliverable{Name: *name, Description: *description, Schema: schema},
		Durable:     true,
		SessionID:   session,
		MaxPokes:    *maxPokes,
		Validator:   validator,
	})
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
