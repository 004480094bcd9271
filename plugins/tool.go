package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/schema"
)

// validation is a validator's verdict, as a plugin's validate export
// returns it.
type validation struct {
	// OK reports whether the deliverable is valid.
	OK bool
	// Value is the validated (possibly normalised) deliverable when OK.
	Value json.RawMessage
	// Errors are "path: message" problems when not OK, the path a JSON
	// Pointer into the deliverable, "/" for the whole of it.
	Errors []string
	// Fuel is the fuel the plugin's check used, failed checks included.
	Fuel int64
}

// moduleTool is a tool of a module: a host.Tool.
type moduleTool struct {
	mod    *Module
	desc   ToolDescription
	spec   host.ToolSpec
	schema *schema.Schema
}

func (t *moduleTool) Spec() host.ToolSpec { return t.spec }

// Metered reports true: a plugin's calls are metered, and their results
// carry the fuel they used (host.ToolResult.Fuel).
func (t *moduleTool) Metered() bool { return true }

// Journaled reports true: every effect of a plugin's call passes through
// its host functions, which journal it (journal.go).
func (t *moduleTool) Journaled() bool { return true }

type callRequest struct {
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	CallID    string          `json:"call_id"`
	SessionID string          `json:"session_id"`
	Tenant    string          `json:"tenant"`
}

// Call validates the input against the tool's schema, runs the plugin
// and returns its output, attributed to the module's hash. String outputs
// reach the model as plain text; other JSON as its text.
func (t *moduleTool) Call(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
	return t.call(ctx, call, nil)
}

// call is Call; with replay, the plugin's HTTP requests and key-value
// accesses are answered from a record (ReplayCall). The result carries
// the call's traffic whenever the plugin ran.
func (t *moduleTool) call(ctx context.Context, call host.ToolCall, replay *replayer) (host.ToolResult, error) {
	input := bytes.TrimSpace(call.Input)
	if len(input) == 0 {
		input = []byte("{}")
	}
	if problems := t.schema.Problems(input, schema.Limits{MaxSteps: t.mod.limits.MaxSchemaSteps}); problems != nil {
		return host.ToolResult{}, t.mod.fail("call", t.spec.Name, detailed(ErrInvalidInput, "%s", strings.Join(problems, "; ")))
	}
	co := callOpts{record: true, replay: replay, keyBase: idempotencyBase(t.mod.tenant, call.SessionID, call.ID)}
	if call.Journal != nil && replay == nil {
		j, err := newJournal(t.mod, call, t.desc.AtMostOnce)
		if err != nil {
			return host.ToolResult{Source: t.mod.hash}, t.mod.fail("call", t.spec.Name, err)
		}
		co.journal = j
	}
	var output string
	if t.desc.Export != "" {
		// A plain module's tool: the export gets the input as is, or one
		// member of it.
		raw := input
		if f := t.desc.InputField; f != "" {
			var members map[string]json.RawMessage
			if err := json.Unmarshal(input, &members); err != nil || members[f] == nil {
				return host.ToolResult{}, t.mod.fail(t.desc.Export, t.spec.Name, detailed(ErrInvalidInput, "the input has no %q", f))
			}
			raw = []byte(unquote(members[f]))
		}
		fuel, traffic, err := t.mod.invokeTraced(ctx, t.desc.Export, t.spec.Name, call.ID, raw, t.spec.Timeout, co, func(out []byte) error {
			out = t.mod.withholdOutput(out)
			if !utf8.Valid(out) {
				return errMalformed("output is not UTF-8 text")
			}
			output = unquote(out)
			return nil
		})
		return host.ToolResult{Output: output, Source: t.mod.hash, Fuel: fuel, Traffic: traffic}, t.mod.withholdError(err)
	}
	req, err := json.Marshal(callRequest{Tool: t.spec.Name, Input: input, CallID: call.ID, SessionID: call.SessionID, Tenant: t.mod.tenant})
	if err != nil {
		return host.ToolResult{}, t.mod.fail("call", t.spec.Name, detailed(ErrInvalidInput, "%v", err))
	}
	fuel, traffic, err := t.mod.invokeTraced(ctx, "call", t.spec.Name, call.ID, req, t.spec.Timeout, co, func(out []byte) error {
		out = t.mod.withholdOutput(out) // (secrets.go)
		var res struct {
			Output json.RawMessage `json:"output"`
			Error  *string         `json:"error"`
		}
		if err := strictJSON(out, &res); err != nil {
			return err
		}
		switch {
		case res.Error != nil:
			msg := *res.Error
			if msg == "" {
				msg = "the tool failed without a message"
			}
			return t.mod.remote(msg)
		case res.Output == nil:
			return errMalformed(`neither "output" nor "error" in %s`, snippet(out))
		}
		output = unquote(res.Output)
		return nil
	})
	if err != nil {
		return host.ToolResult{Source: t.mod.hash, Fuel: fuel, Traffic: traffic}, t.mod.withholdError(err)
	}
	return host.ToolResult{Output: output, Source: t.mod.hash, Fuel: fuel, Traffic: traffic}, nil
}

// strictJSON decodes one JSON object, and nothing after it.
func strictJSON(out []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(v); err != nil {
		return errMalformed("%v in %s", err, snippet(out))
	}
	if dec.More() {
		return errMalformed("trailing data after the JSON object in %s", snippet(out))
	}
	return nil
}

// unquote returns a JSON string's text, or the raw text of anything else.
func unquote(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

func snippet(b []byte) string {
	const max = 120
	if len(b) > max {
		return strings.ToValidUTF8(string(b[:max]), "?") + "…"
	}
	return strings.ToValidUTF8(string(b), "?")
}

// moduleValidator is a validator of a module.
type moduleValidator struct {
	mod    *Module
	desc   ValidatorDescription
	schema *schema.Schema
}

type validateRequest struct {
	Validator   string          `json:"validator"`
	Deliverable json.RawMessage `json:"deliverable"`
}

// Validate checks the deliverable against the validator's schema, then
// runs the plugin, then checks the value it returns against the schema
// again (a plugin's value that does not match its own schema is malformed
// output).
func (v *moduleValidator) check(ctx context.Context, deliverable json.RawMessage) (validation, error) {
	res := validation{}
	deliverable = bytes.TrimSpace(deliverable)
	if problems := v.schema.Problems(deliverable, schema.Limits{MaxSteps: v.mod.limits.MaxSchemaSteps}); problems != nil {
		res.Errors = problems
		return res, nil
	}
	req, err := json.Marshal(validateRequest{Validator: v.desc.Name, Deliverable: deliverable})
	if err != nil {
		return validation{}, v.mod.fail("validate", v.desc.Name, detailed(ErrInvalidInput, "%v", err))
	}
	fuel, err := v.mod.invokeMetered(ctx, "validate", v.desc.Name, "", req, 0, func(out []byte) error {
		out = v.mod.withholdOutput(out)
		var wire struct {
			OK     *bool           `json:"ok"`
			Value  json.RawMessage `json:"value"`
			Errors []string        `json:"errors"`
			Error  *string         `json:"error"`
		}
		if err := strictJSON(out, &wire); err != nil {
			return err
		}
		switch {
		case wire.Error != nil:
			return v.mod.remote(*wire.Error)
		case wire.OK == nil:
			return errMalformed(`no "ok" in %s`, snippet(out))
		case !*wire.OK:
			res.Errors = v.mod.problems(wire.Errors)
			if len(res.Errors) == 0 {
				res.Errors = []string{schema.Root + ": invalid"}
			}
			return nil
		}
		res.OK = true
		res.Value = wire.Value
		if len(res.Value) == 0 {
			res.Value = deliverable
		}
		if problems := v.schema.Problems(res.Value, schema.Limits{MaxSteps: v.mod.limits.MaxSchemaSteps}); problems != nil {
			res.OK, res.Value = false, nil
			return errMalformed("the value returned does not match the validator's own schema: %s", strings.Join(problems, "; "))
		}
		return nil
	})
	res.Fuel = fuel
	if err != nil {
		return validation{Fuel: fuel}, v.mod.withholdError(err)
	}
	return res, nil
}

// maxPluginProblems bounds the problems a validator may report at once.
const maxPluginProblems = 20

// problems bounds a validator's problems: at most maxPluginProblems of
// them, and Limits.MaxErrorBytes of text in all.
func (m *Module) problems(ps []string) []string {
	budget := m.limits.MaxErrorBytes
	var out []string
	for i, p := range ps {
		if i == maxPluginProblems || budget <= 0 {
			out = append(out, fmt.Sprintf("(and %d more problems)", len(ps)-i))
			break
		}
		p = clip(p, budget)
		budget -= len(p)
		out = append(out, p)
	}
	return out
}

// modulePolicy is a policy of a module.
type modulePolicy struct {
	mod  *Module
	desc PolicyDescription
}

type decideRequest struct {
	Policy string `json:"policy"`
	Tool   struct {
		Name   string      `json:"name"`
		Effect host.Effect `json:"effect"`
	} `json:"tool"`
	Input     json.RawMessage `json:"input"`
	SessionID string          `json:"session_id"`
	Tenant    string          `json:"tenant"`
	Agent     string          `json:"agent"`
}

// Name returns the policy's name.
func (p *modulePolicy) Name() string { return p.desc.Name }

// Decide runs the plugin's policy. The decision's Source is the module's
// content hash.
func (p *modulePolicy) Decide(ctx context.Context, r host.PolicyRequest) (host.Decision, error) {
	w := decideRequest{Policy: p.desc.Name, Input: bytes.TrimSpace(r.Input), SessionID: r.SessionID, Tenant: p.mod.tenant, Agent: r.Agent}
	w.Tool.Name, w.Tool.Effect = r.Tool.Name, r.Tool.Effect
	if len(w.Input) == 0 {
		w.Input = json.RawMessage("{}")
	}
	req, err := json.Marshal(w)
	if err != nil {
		return host.Decision{}, p.mod.fail("decide", p.desc.Name, detailed(ErrInvalidInput, "%v", err))
	}
	d := host.Decision{Source: p.mod.hash}
	fuel, err := p.mod.invokeMetered(ctx, "decide", p.desc.Name, "", req, 0, func(out []byte) error {
		out = p.mod.withholdOutput(out)
		var wire struct {
			Decision *host.Verdict `json:"decision"`
			Reason   string        `json:"reason"`
			Summary  string        `json:"summary"`
			Error    *string       `json:"error"`
		}
		if err := strictJSON(out, &wire); err != nil {
			return err
		}
		if wire.Error != nil {
			return p.mod.remote(*wire.Error)
		}
		if wire.Decision == nil {
			return errMalformed(`no "decision" in %s`, snippet(out))
		}
		switch *wire.Decision {
		case host.Allow, host.RequireApproval, host.Deny:
		default:
			return errMalformed("unknown decision %q", *wire.Decision)
		}
		d.Verdict, d.Reason, d.Summary = *wire.Decision, p.mod.clip(wire.Reason), p.mod.clip(wire.Summary)
		return nil
	})
	if err != nil {
		return host.Decision{Source: p.mod.hash, Fuel: fuel}, p.mod.withholdError(err)
	}
	d.Fuel = fuel
	return d, nil
}

// Metered reports true: a plugin's decisions are metered, and carry the
// fuel they used (host.Decision.Fuel).
func (p *modulePolicy) Metered() bool { return true }

// Validate checks a deliverable as the host asks (see [host.Validator]):
// against the validator's schema, then by the plugin; an invalid one's
// problems are what the model is shown.
func (v *moduleValidator) Validate(ctx context.Context, deliverable json.RawMessage) (json.RawMessage, []string, error) {
	res, err := v.ValidateMetered(ctx, deliverable)
	return res.Value, res.Problems, err
}

// ValidateMetered is Validate, with the fuel the check used (see
// [host.MeteredValidator]).
func (v *moduleValidator) ValidateMetered(ctx context.Context, deliverable json.RawMessage) (host.Validation, error) {
	res, err := v.check(ctx, deliverable)
	return hostVerdict(res, err, deliverable, v.mod.hash)
}

// Metered reports true: a plugin's checks are metered.
func (v *moduleValidator) Metered() bool { return true }

// hostVerdict turns a plugin's verdict on deliverable into the host's;
// source is the module's hash.
func hostVerdict(res validation, err error, deliverable json.RawMessage, source string) (host.Validation, error) {
	v := host.Validation{Fuel: res.Fuel, Source: source}
	switch {
	case err != nil:
		return v, err
	case !res.OK && len(res.Errors) == 0:
		v.Problems = []string{schema.Root + ": the validator refused the deliverable without saying why"}
	case !res.OK:
		v.Problems = res.Errors
	case len(res.Value) == 0:
		v.Value = deliverable
	default:
		v.Value = res.Value
	}
	return v, nil
}

var (
	_ host.Tool             = (*moduleTool)(nil)
	_ host.MeteredValidator = (*moduleValidator)(nil)
	_ host.Policy           = (*modulePolicy)(nil)
)
