package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentichost/agentic/host/schema"
)

// Validator checks a task's deliverable (see [Host.Task]). The host calls it
// inside the submit_deliverable tool call, so that what it finds goes back
// to the model, which may fix its submission and submit again.
//
// Validate returns, for a deliverable (the JSON value the model submitted):
//
//   - value: the accepted deliverable, possibly normalised by the validator;
//     nil means the deliverable as submitted. Used only when problems is
//     empty and err is nil.
//   - problems: what is wrong with the deliverable, one model-fixable
//     "path: message" line each, path a JSON Pointer into the deliverable
//     ("/" for the deliverable itself). Non-empty means rejected: the model
//     sees the lines as the tool's error result.
//   - err: the validator itself failed (a plugin crashed, a resource it
//     needs is unreachable). The deliverable is neither accepted nor
//     rejected: the model is told that the validation could not run and is
//     asked to submit again, and the task goes on (bounded by the agent's
//     MaxSteps). A panic in Validate is treated the same way.
//
// Validate may be called concurrently by different tasks. [SchemaValidator]
// is the default; Wasm validator plugins implement the same interface.
type Validator interface {
	Validate(ctx context.Context, deliverable json.RawMessage) (value json.RawMessage, problems []string, err error)
}

// Validation is what a metered validator found (see [MeteredValidator]).
type Validation struct {
	// Value and Problems are Validate's value and problems.
	Value    json.RawMessage
	Problems []string
	// Fuel is the fuel the check used, failed checks included; Source
	// identifies the validator's code (a plugin module's content hash).
	Fuel   int64
	Source string
}

// MeteredValidator is a [Validator] whose checks are metered in fuel: a
// Wasm plugin's validator. The host calls ValidateMetered rather than
// Validate, and records the fuel as the submission's (the
// submit_deliverable call's ToolResult.Fuel, and its Source), where the
// hooks, the ledger and the usage see it; when the validator says it is
// [Metered], a hook keeping a plugin budget may refuse the submission.
type MeteredValidator interface {
	Validator
	// ValidateMetered is Validate, telling the fuel the check used; err
	// is Validate's.
	ValidateMetered(ctx context.Context, deliverable json.RawMessage) (Validation, error)
}

// SchemaValidator returns a [Validator] that checks a deliverable against a
// JSON Schema, as package schema checks (see [schema.Compile]): draft
// 2020-12 unless it says otherwise, "format" asserted, the schema
// self-contained ("$defs" are fine, files and URLs are not), the work of a
// check bounded ([schema.DefaultMaxSteps]). The schema is compiled once,
// here; a schema that does not compile is an error.
//
// Problems come as "path: message" lines, path a JSON Pointer into the
// deliverable ("/" for its root), one line per failed leaf keyword, at most
// 20 (then a line tells how many more there were).
func SchemaValidator(raw json.RawMessage) (Validator, error) {
	sch, err := schema.Compile(raw)
	if err != nil {
		return nil, fmt.Errorf("host: the deliverable schema does not compile: %v", err)
	}
	return &schemaValidator{schema: sch}, nil
}

type schemaValidator struct {
	schema *schema.Schema
}

func (v *schemaValidator) Validate(_ context.Context, deliverable json.RawMessage) (json.RawMessage, []string, error) {
	if problems := v.schema.Problems(deliverable, schema.Limits{}); problems != nil {
		return nil, problems, nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, deliverable) != nil {
		return deliverable, nil, nil
	}
	return buf.Bytes(), nil, nil
}

var _ Validator = (*schemaValidator)(nil)
