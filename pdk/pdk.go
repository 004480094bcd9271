package pdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// ABIVersion is the version of the plugin ABI this kit speaks, reported by
// describe. The host rejects a plugin whose major version it does not speak.
const ABIVersion = "1.1"

// Effect is what a tool does to the world.
type Effect string

// The tool effects.
const (
	// Read: the tool only reads; running it again is harmless.
	Read Effect = "read"
	// Write: the tool changes state the host owns (such as the key-value
	// store).
	Write Effect = "write"
	// External: the tool changes the world outside the host (sends mail,
	// publishes, pays). The host records its intent before it runs and may
	// ask a person for approval.
	External Effect = "external"
)

// Tool describes a tool to the host and the model.
type Tool struct {
	// Name is what the model calls the tool by: 1 to 64 characters of
	// [A-Za-z0-9_-], unique in the plugin. Required.
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema of the tool's input, an object schema.
	// The host validates the model's input against it before calling.
	// Default: {"type":"object"}.
	InputSchema string
	// Effect is the tool's effect on the world. Default: Read.
	Effect Effect
	// Idempotent declares that running the tool again with the same call
	// id has no further effect (use Call.ID as the idempotency key).
	// Default: false.
	Idempotent bool
	// AtMostOnce declares that none of the tool's HTTP requests may reach
	// its server twice. The host journals every request before it sends
	// it; when its host stops with a request sent and not answered, the
	// call is replayed and that request is sent again with the same
	// Idempotency-Key ([IdempotencyKey]) — unless the tool is AtMostOnce:
	// then the call ends "outcome unknown", naming the request. Default:
	// false.
	AtMostOnce bool
	// Timeout bounds one call; the tenant's limit still applies. Default:
	// 0, the tenant's limit.
	Timeout time.Duration
}

// Call is the context of one tool call.
type Call struct {
	// Tool is the name of the tool called.
	Tool string
	// ID is the call's id, unique in the session: an idempotency key.
	ID string
	// SessionID is the session the call belongs to.
	SessionID string
	// Tenant is the tenant the plugin runs for.
	Tenant string
}

// Validator describes a deliverable validator.
type Validator struct {
	// Name identifies the validator in the plugin. Required.
	Name string
	// Description says what the validator checks.
	Description string
	// Schema is the JSON Schema of the deliverable. The host checks the
	// deliverable against it before calling the validator, and checks the
	// value the validator returns against it too. Default: {} (anything).
	Schema string
}

// Policy describes an approval policy.
type Policy struct {
	// Name identifies the policy in the plugin. Required.
	Name string
	// Description says what the policy decides.
	Description string
}

// PolicyRequest is what a policy decides on: a tool call about to run.
type PolicyRequest struct {
	// Policy is the name of the policy asked.
	Policy string `json:"policy"`
	// Tool is the tool about to be called.
	Tool ToolRef `json:"tool"`
	// Input is the tool call's input, JSON.
	Input json.RawMessage `json:"input"`
	// SessionID is the session calling.
	SessionID string `json:"session_id"`
	// Tenant is the tenant the plugin runs for.
	Tenant string `json:"tenant"`
	// Agent is the agent calling.
	Agent string `json:"agent"`
}

// ToolRef names a tool and its effect.
type ToolRef struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Effect is the tool's declared effect.
	Effect Effect `json:"effect"`
}

// Verdict is a policy's answer.
type Verdict string

// The verdicts.
const (
	Allow           Verdict = "allow"
	RequireApproval Verdict = "require_approval"
	Deny            Verdict = "deny"
)

// Decision is a policy's answer with its reason.
type Decision struct {
	// Decision is the verdict. Required.
	Decision Verdict `json:"decision"`
	// Reason explains the verdict (logged, shown to approvers).
	Reason string `json:"reason,omitempty"`
	// Summary describes the call for a person asked to approve it.
	Summary string `json:"summary,omitempty"`
}

// ValidationError reports that a deliverable is invalid. Return it (see
// [Invalid]) from a validator handler; any other error means the validator
// itself failed.
type ValidationError struct {
	// Problems are "path: message" strings, the path a JSON Pointer
	// ("/items/0/price") or "/" for the whole deliverable.
	Problems []string
}

// Error lists the problems.
func (e *ValidationError) Error() string {
	return "invalid deliverable: " + strings.Join(e.Problems, "; ")
}

// Invalid returns a *ValidationError with the given "path: message"
// problems.
func Invalid(problems ...string) error {
	if len(problems) == 0 {
		problems = []string{"/: invalid"}
	}
	return &ValidationError{Problems: problems}
}

type toolEntry struct {
	spec    Tool
	handler func(Call, json.RawMessage) (json.RawMessage, error)
}

type validatorEntry struct {
	spec    Validator
	handler func(json.RawMessage) (json.RawMessage, error)
}

type policyEntry struct {
	spec    Policy
	handler func(PolicyRequest) (Decision, error)
}

func (e toolEntry) name() string      { return e.spec.Name }
func (e validatorEntry) name() string { return e.spec.Name }
func (e policyEntry) name() string    { return e.spec.Name }

// registry is what the plugin registered. Registration happens in init
// functions, before any export runs; Wasm is single-threaded, so no lock.
var registry struct {
	tools      []toolEntry
	validators []validatorEntry
	policies   []policyEntry
	needs      *Needs
	problems   []string
}

// Needs is what a plugin needs of its sandbox (ABI 1.1). A plugin that
// says (see [Need]) runs with what it needs and no more, whatever its
// grant allows, and is refused at load where it is granted less; a new
// version that needs more than the one serving is held for a person's
// approval where the host holds upgrades that widen.
type Needs struct {
	// AllowedHosts are the hosts it reaches: "api.example.com",
	// "api.example.com:8443" or "*.example.com".
	AllowedHosts []string `json:"allowed_hosts"`
	// AllowPrivateNetwork: it reaches loopback or private addresses.
	AllowPrivateNetwork bool `json:"allow_private_network,omitempty"`
	// KV: it uses the key-value store.
	KV bool `json:"kv,omitempty"`
}

// Need says what the plugin needs of its sandbox; call it where the
// Register calls are (main or init). Called again, the last call wins. A
// plugin that never calls it says nothing, and gets its whole grant.
func Need(n Needs) {
	n.AllowedHosts = append([]string{}, n.AllowedHosts...)
	registry.needs = &n
}

func problem(format string, args ...any) {
	registry.problems = append(registry.problems, fmt.Sprintf(format, args...))
}

// claim checks a registration's name and that none of the entries of its
// kind has it; false means the registration is refused (the problem is
// recorded).
func claim[E interface{ name() string }](kind, name string, entries []E) bool {
	if !checkName(kind, name) {
		return false
	}
	for _, e := range entries {
		if e.name() == name {
			problem("%s %s registered twice", kind, name)
			return false
		}
	}
	return true
}

func checkName(kind, name string) bool {
	if name == "" || len(name) > 64 {
		problem("%s name %q must be 1 to 64 characters", kind, name)
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			problem("%s name %q may only contain [A-Za-z0-9_-]", kind, name)
			return false
		}
	}
	return true
}

func checkSchema(kind, name, schema string) {
	if schema != "" && !json.Valid([]byte(schema)) {
		problem("%s %s: schema is not valid JSON", kind, name)
	}
}

// RegisterTool registers a tool with a typed handler: the call's input is
// decoded into In, and the handler's Out is encoded as the tool's output
// (a string output reaches the model as plain text). An error returned by
// the handler becomes an error result the model sees. Call it from an init
// function; a problem with the registration (bad name, invalid schema,
// duplicate) makes the plugin fail to load, with the reason.
func RegisterTool[In, Out any](t Tool, handler func(c Call, in In) (Out, error)) {
	if !claim("tool", t.Name, registry.tools) {
		return
	}
	checkSchema("tool", t.Name, t.InputSchema)
	switch t.Effect {
	case "":
		t.Effect = Read
	case Read, Write, External:
	default:
		problem("tool %s: unknown effect %q", t.Name, t.Effect)
	}
	registry.tools = append(registry.tools, toolEntry{spec: t, handler: func(c Call, raw json.RawMessage) (json.RawMessage, error) {
		var in In
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, fmt.Errorf("invalid input: %w", err)
			}
		}
		out, err := handler(c, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}})
}

// RegisterValidator registers a deliverable validator with a typed handler:
// the deliverable is decoded into T (a deliverable that does not decode is
// invalid). The handler returns the validated value (nil: the deliverable
// as given), a *ValidationError (see [Invalid]) when the deliverable is
// invalid, or another error when the validator itself failed.
func RegisterValidator[T any](v Validator, handler func(deliverable T) (any, error)) {
	if !claim("validator", v.Name, registry.validators) {
		return
	}
	checkSchema("validator", v.Name, v.Schema)
	registry.validators = append(registry.validators, validatorEntry{spec: v, handler: func(raw json.RawMessage) (json.RawMessage, error) {
		var d T
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, Invalid("/: " + err.Error())
		}
		value, err := handler(d)
		if err != nil {
			return nil, err
		}
		if value == nil {
			return raw, nil
		}
		return json.Marshal(value)
	}})
}

// RegisterPolicy registers an approval policy. The handler's error means
// the policy failed (the host then treats the call as needing approval or
// denies it, by its own configuration), not a denial: deny with a Decision.
func RegisterPolicy(p Policy, handler func(r PolicyRequest) (Decision, error)) {
	if !claim("policy", p.Name, registry.policies) {
		return
	}
	registry.policies = append(registry.policies, policyEntry{spec: p, handler: handler})
}

// Wire types of the ABI.

type describeOut struct {
	ABI        string          `json:"abi"`
	Tools      []toolDesc      `json:"tools"`
	Validators []validatorDesc `json:"validators"`
	Policies   []policyDesc    `json:"policies"`
	Needs      *Needs          `json:"needs,omitempty"`
}

type toolDesc struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Effect      Effect          `json:"effect"`
	Idempotent  bool            `json:"idempotent"`
	AtMostOnce  bool            `json:"at_most_once,omitempty"`
	TimeoutMS   int64           `json:"timeout_ms,omitempty"`
}

type validatorDesc struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

type policyDesc struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

type callIn struct {
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	CallID    string          `json:"call_id"`
	SessionID string          `json:"session_id"`
	Tenant    string          `json:"tenant"`
}

type validateIn struct {
	Validator   string          `json:"validator"`
	Deliverable json.RawMessage `json:"deliverable"`
}

type errorOut struct {
	Error string `json:"error"`
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorOut{Error: "pdk: encoding the result: " + err.Error()})
	}
	return b
}

func errorJSON(format string, args ...any) []byte {
	return marshal(errorOut{Error: fmt.Sprintf(format, args...)})
}

// Dispatch runs one export of the plugin on its JSON input and returns the
// JSON output, exactly as the host would see it. The Wasm build calls it
// from the exports; tests may call it directly (natively, without Wasm).
// A panic in a handler is recovered and reported as {"error": …}.
func Dispatch(export string, input []byte) (output []byte) {
	defer func() {
		if p := recover(); p != nil {
			output = errorJSON("panic in %s: %v\n%s", export, p, stackTail())
		}
	}()
	switch export {
	case "describe":
		return describe()
	case "call":
		return call(input)
	case "validate":
		return validate(input)
	case "decide":
		return decide(input)
	}
	return errorJSON("pdk: unknown export %q", export)
}

func stackTail() string {
	s := string(debug.Stack())
	if len(s) > 2048 {
		s = s[:2048]
	}
	return s
}

func describe() []byte {
	if len(registry.problems) > 0 {
		return errorJSON("pdk: %s", strings.Join(registry.problems, "; "))
	}
	out := describeOut{ABI: ABIVersion, Tools: []toolDesc{}, Validators: []validatorDesc{}, Policies: []policyDesc{}, Needs: registry.needs}
	for _, e := range registry.tools {
		schema := e.spec.InputSchema
		if schema == "" {
			schema = `{"type":"object"}`
		}
		out.Tools = append(out.Tools, toolDesc{
			Name:        e.spec.Name,
			Description: e.spec.Description,
			InputSchema: json.RawMessage(schema),
			Effect:      e.spec.Effect,
			Idempotent:  e.spec.Idempotent,
			AtMostOnce:  e.spec.AtMostOnce,
			TimeoutMS:   e.spec.Timeout.Milliseconds(),
		})
	}
	for _, e := range registry.validators {
		schema := e.spec.Schema
		if schema == "" {
			schema = `{}`
		}
		out.Validators = append(out.Validators, validatorDesc{Name: e.spec.Name, Description: e.spec.Description, Schema: json.RawMessage(schema)})
	}
	for _, e := range registry.policies {
		out.Policies = append(out.Policies, policyDesc{Name: e.spec.Name, Description: e.spec.Description})
	}
	return marshal(out)
}

func call(input []byte) []byte {
	var in callIn
	if err := json.Unmarshal(input, &in); err != nil {
		return errorJSON("pdk: malformed call request: %v", err)
	}
	for _, e := range registry.tools {
		if e.spec.Name == in.Tool {
			out, err := e.handler(Call{Tool: in.Tool, ID: in.CallID, SessionID: in.SessionID, Tenant: in.Tenant}, in.Input)
			if err != nil {
				return marshal(errorOut{Error: err.Error()})
			}
			// out comes from json.Marshal: no need to check it again (every
			// pass over the bytes costs inside the sandbox).
			res := make([]byte, 0, len(out)+12)
			res = append(res, `{"output":`...)
			res = append(res, out...)
			return append(res, '}')
		}
	}
	return errorJSON("pdk: unknown tool %q", in.Tool)
}

func validate(input []byte) []byte {
	var in validateIn
	if err := json.Unmarshal(input, &in); err != nil {
		return errorJSON("pdk: malformed validate request: %v", err)
	}
	for _, e := range registry.validators {
		if e.spec.Name == in.Validator {
			value, err := e.handler(in.Deliverable)
			var verr *ValidationError
			switch {
			case errors.As(err, &verr):
				return marshal(struct {
					OK     bool     `json:"ok"`
					Errors []string `json:"errors"`
				}{false, verr.Problems})
			case err != nil:
				return marshal(errorOut{Error: err.Error()})
			}
			return marshal(struct {
				OK    bool            `json:"ok"`
				Value json.RawMessage `json:"value"`
			}{true, value})
		}
	}
	return errorJSON("pdk: unknown validator %q", in.Validator)
}

func decide(input []byte) []byte {
	var in PolicyRequest
	if err := json.Unmarshal(input, &in); err != nil {
		return errorJSON("pdk: malformed decide request: %v", err)
	}
	for _, e := range registry.policies {
		if e.spec.Name == in.Policy {
			d, err := e.handler(in)
			if err != nil {
				return marshal(errorOut{Error: err.Error()})
			}
			switch d.Decision {
			case Allow, RequireApproval, Deny:
			default:
				return errorJSON("policy %s returned the unknown decision %q", in.Policy, d.Decision)
			}
			return marshal(d)
		}
	}
	return errorJSON("pdk: unknown policy %q", in.Policy)
}
