package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The engine of tasks: the state of one task's run, its tools
// (submit_deliverable, cancel_task) and the hooks that steer the run; and
// rebuilding all of it from the ledger when a host resumes the run.

// taskPoke is the text of the poke sent to a model that ended its turn
// without submitting.
const taskPoke = "You have not finished the task: call submit_deliverable with the deliverable, or cancel_task if it cannot be done."

// taskState is one task's progress, shared by its tools and hooks.
type taskState struct {
	sessionID string
	record    *ledger.TaskRun // what the run-start records
	validator Validator
	wrapped   bool // the deliverable is the "value" argument
	maxPokes  int  // 0: none

	mu        sync.Mutex
	done      bool // submitted or cancelled
	submitted bool
	value     json.RawMessage
	cancelled bool
	reason    string
	stops     int // turn ends without a terminal tool
	pokes     int
}

func (t *taskState) fail(out Outcome, reason string) Outcome {
	out.Status, out.Reason = OutcomeFailed, reason
	return out
}

// prepareTask checks the spec, fills its defaults and builds the agent that
// runs it. The state is returned (with the session id) even on error.
func (h *Host) prepareTask(spec TaskSpec) (*taskState, Agent, error) {
	t := &taskState{sessionID: spec.SessionID}
	if t.sessionID == "" {
		t.sessionID = "task-" + ledger.NewID("")
	}
	var errs []error
	if strings.TrimSpace(spec.Prompt) == "" {
		errs = append(errs, errors.New("task: TaskSpec.Prompt is required"))
	}
	if !storage.ValidSessionID(t.sessionID) {
		errs = append(errs, fmt.Errorf("task: TaskSpec.SessionID %q is not a valid session id", t.sessionID))
	}
	switch {
	case spec.MaxPokes == 0:
		t.maxPokes = DefaultMaxPokes
	case spec.MaxPokes == -1:
		t.maxPokes = 0
	case spec.MaxPokes < -1:
		errs = append(errs, fmt.Errorf("task: TaskSpec.MaxPokes %d is negative (use -1 to disable pokes)", spec.MaxPokes))
	default:
		t.maxPokes = spec.MaxPokes
	}
	agent := h.agent
	if spec.Agent != nil {
		a, err := normalizeAgent(*spec.Agent)
		if err != nil {
			errs = append(errs, fmt.Errorf("task: TaskSpec.Agent: %w", err))
		}
		agent = a
	}
	for _, tool := range agent.Tools {
		if tool == nil {
			continue
		}
		if name := tool.Spec().Name; name == SubmitToolName || name == CancelToolName {
			errs = append(errs, fmt.Errorf("task: the agent has a tool named %s, which the task needs for itself", name))
		}
	}
	schema := spec.Deliverable.Schema
	if len(schema) == 0 && (spec.Validator != nil || spec.ValidatorName != "") {
		schema = json.RawMessage(`{}`)
	}
	switch {
	case len(schema) == 0:
		errs = append(errs, errors.New("task: Deliverable.Schema is required"))
	case !json.Valid(schema):
		errs = append(errs, errors.New("task: Deliverable.Schema is not valid JSON"))
	default:
		t.validator = spec.Validator
		if t.validator == nil && spec.ValidatorName != "" {
			t.validator = h.validators[spec.ValidatorName]
			if t.validator == nil {
				errs = append(errs, fmt.Errorf("task: TaskSpec.ValidatorName %q is not in the host's Options.Validators", spec.ValidatorName))
			}
		}
		if t.validator == nil && spec.ValidatorName == "" {
			v, err := SchemaValidator(schema)
			if err != nil {
				errs = append(errs, fmt.Errorf("task: %w", err))
			}
			t.validator = v
		}
		var err error
		_, t.wrapped, err = submitParameters(schema)
		if err != nil {
			errs = append(errs, fmt.Errorf("task: Deliverable.Schema: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return t, agent, err
	}
	validatorName := spec.ValidatorName
	if spec.Validator != nil && validatorName == "" {
		validatorName = unnamedValidator
	}
	t.record = &ledger.TaskRun{Deliverable: spec.Deliverable.Name, Description: spec.Deliverable.Description,
		Schema: schema, Validator: validatorName, MaxPokes: t.maxPokes}
	return t, t.agentFor(agent), nil
}

// unnamedValidator is recorded for a task whose Validator has no name: a
// host resuming its run cannot find it.
const unnamedValidator = "!unnamed"

// agentFor returns agent with the task's tools and instructions added.
func (t *taskState) agentFor(agent Agent) Agent {
	params, _, _ := submitParameters(t.record.Schema)
	name := t.record.Deliverable
	if name == "" {
		name = "deliverable"
	}
	what := name
	if d := strings.TrimSpace(t.record.Description); d != "" {
		what += " (" + d + ")"
	}
	argument := "Its arguments are the " + name + " itself."
	if t.wrapped {
		argument = `Its "value" argument is the ` + name + "."
	}
	var submit Tool = NewTool(ToolSpec{
		Name: SubmitToolName,
		Description: "Submit the task's result, the " + what + ", and end the task. " + argument +
			" It is validated: an error result lists the problems (\"path: message\", paths are JSON Pointers); fix them and call again.",
		InputSchema: params,
		Effect:      EffectWrite, // the task's outcome, which the host owns
	}, t.submit)
	if IsMetered(t.validator) {
		submit = meteredTool{submit}
	}
	cancel := NewTool(ToolSpec{
		Name:        CancelToolName,
		Description: "Give up the task because it cannot be done, and say why. Use it only when no valid " + name + " can be produced.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string","description":"Why the task cannot be done."}},"required":["reason"]}`),
		Effect:      EffectWrite,
	}, t.cancel)
	agent.Tools = append(slices.Clone(agent.Tools), submit, cancel)
	note := "You are working on a task that ends only through a tool call. When it is done, call " + SubmitToolName +
		" with the " + what + "; if it is rejected, fix the problems reported and call it again. If the task cannot be done, call " +
		CancelToolName + " with the reason."
	if agent.System != "" {
		agent.System += "\n\n" + note
	} else {
		agent.System = note
	}
	return agent
}

// hooks returns the hooks that steer the task's run.
func (t *taskState) hooks() *runHooks {
	return &runHooks{afterTools: t.afterTools, turnEnd: t.turnEnd, task: t.record, deliverable: t.deliverable}
}

// deliverable returns the accepted deliverable, nil before one.
func (t *taskState) deliverable() json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.submitted {
		return nil
	}
	return t.value
}

// resumeTask rebuilds the state of a task's run from the ledger, for a host
// that resumes the run after a restart: the validator the run names, the
// pokes already sent, and a terminal tool call (submit or cancel) already
// answered, which stands. carryOn false starts the task afresh (a restart
// from scratch).
func (h *Host) resumeTask(ctx context.Context, view ledger.Run, carryOn bool) (*taskState, error) {
	rec := view.Task
	t := &taskState{record: rec, maxPokes: rec.MaxPokes}
	switch name := rec.Validator; {
	case name == "":
		v, err := SchemaValidator(rec.Schema)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		t.validator = v
	case name == unnamedValidator:
		return nil, errors.New("task: its validator has no name (TaskSpec.ValidatorName), so the host that resumed the run cannot check its submissions")
	default:
		t.validator = h.validators[name]
		if t.validator == nil {
			return nil, fmt.Errorf("task: its validator %q is not in this host's Options.Validators", name)
		}
	}
	var err error
	if _, t.wrapped, err = submitParameters(rec.Schema); err != nil {
		return nil, fmt.Errorf("task: %w", err)
	}
	if !carryOn {
		return t, nil
	}
	t.pokes, t.stops = view.Pokes, view.Pokes
	calls := map[string]ledger.ToolCall{}
	for _, s := range view.Steps {
		for _, c := range s.ToolCalls {
			calls[c.ID] = c
		}
	}
	for _, res := range view.Results {
		if res.IsError || res.Synthetic {
			continue
		}
		c := calls[res.CallID]
		switch res.Name {
		case SubmitToolName:
			// Accepted before the restart: validate it again for the value
			// the validator makes of it.
			deliverable := json.RawMessage(c.Arguments)
			if t.wrapped {
				var args map[string]json.RawMessage
				if json.Unmarshal(deliverable, &args) == nil && args["value"] != nil {
					deliverable = args["value"]
				}
			}
			// (The fuel of this check is not recorded: it recomputes the
			// value of a submission accepted, and counted, before.)
			value, problems, _, err := t.validate(ctx, deliverable)
			if err != nil || len(problems) > 0 || value == nil {
				value = deliverable
			}
			t.done, t.submitted, t.value = true, true, value
		case CancelToolName:
			var in struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal([]byte(c.Arguments), &in)
			t.done, t.cancelled, t.reason = true, true, strings.TrimSpace(in.Reason)
		}
		if t.done {
			break
		}
	}
	return t, nil
}

// submitParameters returns the submit_deliverable tool's parameters for a
// deliverable schema, and whether the schema had to be wrapped.
func submitParameters(schema json.RawMessage) (json.RawMessage, bool, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(schema, &obj); err == nil && obj != nil {
		var typ string
		if json.Unmarshal(obj["type"], &typ) == nil && typ == "object" {
			return schema, false, nil
		}
	}
	root := map[string]any{"type": "object", "required": []string{"value"}}
	inner := schema
	if obj != nil {
		// The root keeps the definitions, so that "#/$defs/…" still
		// points at them.
		moved := false
		for _, k := range []string{"$defs", "definitions"} {
			if d, ok := obj[k]; ok {
				root[k] = d
				delete(obj, k)
				moved = true
			}
		}
		if moved {
			b, err := json.Marshal(obj)
			if err != nil {
				return nil, false, err
			}
			inner = b
		}
	}
	root["properties"] = map[string]json.RawMessage{"value": inner}
	b, err := json.Marshal(root)
	return b, true, err
}

// submit is the submit_deliverable tool.
func (t *taskState) submit(ctx context.Context, call ToolCall) (ToolResult, error) {
	t.mu.Lock()
	done := t.done
	t.mu.Unlock()
	if done {
		return ToolResult{}, errors.New("the task is already finished; nothing more can be submitted")
	}
	deliverable := call.Input
	if t.wrapped {
		var args map[string]json.RawMessage
		if json.Unmarshal(call.Input, &args) != nil || args["value"] == nil {
			return ToolResult{}, rejected([]string{`/value: missing: pass the deliverable as {"value": ...}`})
		}
		deliverable = args["value"]
	}
	value, problems, metered, err := t.validate(ctx, deliverable)
	switch {
	case err != nil:
		return metered, fmt.Errorf("the deliverable could not be validated (%v); it was neither accepted nor rejected: call %s again", err, SubmitToolName)
	case len(problems) > 0:
		if t.wrapped {
			under := make([]string, len(problems))
			for i, p := range problems {
				switch {
				case strings.HasPrefix(p, "/: "):
					under[i] = "/value" + p[1:]
				case strings.HasPrefix(p, "/"):
					under[i] = "/value" + p
				default:
					under[i] = p
				}
			}
			problems = under
		}
		return metered, rejected(problems)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return metered, errors.New("the task is already finished; nothing more can be submitted")
	}
	t.done, t.submitted, t.value = true, true, value
	metered.Output = "The deliverable was accepted; the task is complete."
	return metered, nil
}

// meteredTool is a tool whose calls run metered code: a submission checked
// by a metered validator.
type meteredTool struct{ Tool }

func (meteredTool) Metered() bool { return true }

// rejected is the error result of a submission with problems.
func rejected(problems []string) error {
	return fmt.Errorf("the deliverable is invalid; fix these problems and call %s again:\n%s", SubmitToolName, strings.Join(problems, "\n"))
}

// validate runs the validator, turning a panic into an error and checking
// what it returns. metered carries the fuel and source of a metered
// validator's check.
func (t *taskState) validate(ctx context.Context, deliverable json.RawMessage) (value json.RawMessage, problems []string, metered ToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			value, problems, err = nil, nil, fmt.Errorf("the validator panicked: %v", p)
		}
	}()
	if mv, ok := t.validator.(MeteredValidator); ok {
		var v Validation
		v, err = mv.ValidateMetered(ctx, deliverable)
		value, problems, metered = v.Value, v.Problems, ToolResult{Fuel: max(v.Fuel, 0), Source: v.Source}
	} else {
		value, problems, err = t.validator.Validate(ctx, deliverable)
	}
	if err != nil || len(problems) > 0 {
		return nil, problems, metered, err
	}
	if value == nil {
		value = deliverable
	}
	if !json.Valid(value) {
		return nil, nil, metered, errors.New("the validator returned a value that is not valid JSON")
	}
	return value, nil, metered, nil
}

// cancel is the cancel_task tool.
func (t *taskState) cancel(_ context.Context, call ToolCall) (ToolResult, error) {
	var in struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return ToolResult{}, fmt.Errorf(`the arguments must be {"reason": "<why the task cannot be done>"}: %v`, err)
	}
	reason := strings.TrimSpace(in.Reason)
	if reason == "" {
		return ToolResult{}, errors.New(`give the reason the task cannot be done: {"reason": "..."}`)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ToolResult{}, errors.New("the task is already finished; it can no longer be cancelled")
	}
	t.done, t.cancelled, t.reason = true, true, reason
	return ToolResult{Output: "The task is cancelled."}, nil
}

// afterTools ends the run once a terminal tool call succeeded.
func (t *taskState) afterTools() (bool, ledger.RunStatus, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.submitted:
		return true, ledger.RunCompleted, ""
	case t.cancelled:
		return true, ledger.RunCancelled, CancelToolName + ": " + t.reason
	}
	return false, "", ""
}

// turnEnd pokes a model that stopped without submitting, while pokes are
// left, then fails the run.
func (t *taskState) turnEnd() (poke, fail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stops++
	if t.pokes < t.maxPokes {
		t.pokes++
		return taskPoke, ""
	}
	times := "times"
	if t.stops == 1 {
		times = "time"
	}
	return "", fmt.Sprintf("the model stopped %d %s without submitting", t.stops, times)
}
