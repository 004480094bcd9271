package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/schema"
)

// ABIMajor is the plugin ABI major version this host speaks. describe must
// report "1" or "1.x"; a minor version above the host's is accepted (minor
// versions only add optional fields).
const ABIMajor = 1

// ABIVersion is the full ABI version this host implements.
const ABIVersion = "1.1"

// Description is what a plugin offers, as reported by its describe export
// (or a sidecar manifest), after validation.
type Description struct {
	// ABI is the ABI version the plugin speaks ("1.0").
	ABI string `json:"abi"`
	// Tools are the plugin's tools, sorted by name.
	Tools []ToolDescription `json:"tools"`
	// Validators are its deliverable validators, sorted by name.
	Validators []ValidatorDescription `json:"validators"`
	// Policies are its approval policies, sorted by name.
	Policies []PolicyDescription `json:"policies"`
	// Needs is what it says it needs of the sandbox (see [Needs]); nil
	// when it does not say, and so gets its whole grant. ABI 1.1.
	Needs *Needs `json:"needs,omitempty"`
}

// ToolDescription describes one tool.
type ToolDescription struct {
	// Name is what the model calls the tool by: 1 to 64 characters of
	// [A-Za-z0-9_-].
	Name string `json:"name"`
	// Description tells the model what the tool does.
	Description string `json:"description"`
	// InputSchema is the JSON Schema (an object schema) of the input; the
	// host validates every input against it. Default: {"type":"object"}.
	InputSchema json.RawMessage `json:"input_schema"`
	// Effect is "read", "write" or "external". Required: a plugin must
	// say what its tools do.
	Effect host.Effect `json:"effect"`
	// Idempotent declares that re-running a call with the same call id
	// has no further effect (the host may then re-run an external call
	// whose outcome a crash left unknown).
	Idempotent bool `json:"idempotent"`
	// AtMostOnce declares that none of the tool's HTTP requests may be
	// sent twice: a request in flight when its host stopped (journaled,
	// its answer not) is not sent again when the call is replayed, and
	// the call ends "outcome unknown" naming it. Default: false, which
	// sends it again with the same Idempotency-Key.
	AtMostOnce bool `json:"at_most_once,omitempty"`
	// TimeoutMS is the tool's own timeout in milliseconds; 0 means the
	// tenant's Limits.CallTimeout, and it can never exceed it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Export is the export a plain module's tool calls (sidecar manifests
	// only); empty for ABI plugins, whose tools go through "call".
	Export string `json:"export,omitempty"`
	// InputField, for a plain module's tool, names the member of the
	// input passed to the export as its raw input (a string member as its
	// text, anything else as JSON). Default: "", the whole input JSON.
	InputField string `json:"input_field,omitempty"`
}

// ValidatorDescription describes one deliverable validator.
type ValidatorDescription struct {
	// Name identifies the validator.
	Name string `json:"name"`
	// Description says what it checks.
	Description string `json:"description"`
	// Schema is the JSON Schema of the deliverable. Default: {}.
	Schema json.RawMessage `json:"schema"`
}

// PolicyDescription describes one approval policy.
type PolicyDescription struct {
	// Name identifies the policy.
	Name string `json:"name"`
	// Description says what it decides.
	Description string `json:"description"`
}

// maxDescriptionItems bounds how many tools, validators and policies one
// plugin may offer.
const maxDescriptionItems = 256

// parseDescription decodes and validates describe's output. It compiles
// every schema; the compiled ones are returned by name.
func parseDescription(out []byte) (Description, map[string]*schema.Schema, error) {
	var raw struct {
		ABI        *string                `json:"abi"`
		Tools      []ToolDescription      `json:"tools"`
		Validators []ValidatorDescription `json:"validators"`
		Policies   []PolicyDescription    `json:"policies"`
		Needs      *Needs                 `json:"needs"`
		Error      *string                `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&raw); err != nil {
		return Description{}, nil, detailed(ErrMalformedOutput, "describe: %v", err)
	}
	if dec.More() {
		return Description{}, nil, detailed(ErrMalformedOutput, "describe: trailing data after the JSON object")
	}
	if raw.Error != nil {
		return Description{}, nil, detailed(ErrInvalidDescription, "describe failed: %s", firstLines(*raw.Error, 20))
	}
	if raw.ABI == nil {
		return Description{}, nil, detailed(ErrABIVersion, "describe reports no \"abi\" (this host speaks %d.x)", ABIMajor)
	}
	if err := checkABI(*raw.ABI); err != nil {
		return Description{}, nil, err
	}
	d := Description{ABI: *raw.ABI, Tools: raw.Tools, Validators: raw.Validators, Policies: raw.Policies, Needs: raw.Needs}
	schemas, err := d.validate(false)
	return d, schemas, err
}

func checkABI(v string) error {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return detailed(ErrABIVersion, "abi %q is not a version", v)
	}
	if n != ABIMajor {
		return detailed(ErrABIVersion, "abi %q: this host speaks %d.x", v, ABIMajor)
	}
	return nil
}

// validate checks names, effects, timeouts and schemas, sorts the lists and
// fills defaults. sidecar is true for plain modules, whose tools name an
// export.
func (d *Description) validate(sidecar bool) (map[string]*schema.Schema, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidDescription, fmt.Sprintf(format, args...)))
	}
	if n := len(d.Tools) + len(d.Validators) + len(d.Policies); n == 0 {
		bad("it offers no tools, validators or policies")
	} else if n > maxDescriptionItems {
		bad("it offers %d items, more than %d", n, maxDescriptionItems)
	}
	schemas := map[string]*schema.Schema{}
	seen := map[string]bool{}
	// claim checks an item's name and that no item of its kind has it
	// already; false when the name is unusable.
	claim := func(kind, name string) bool {
		if !host.ValidToolName(name) {
			bad("%s name %q: want 1 to 64 characters of [A-Za-z0-9_-]", kind, name)
			return false
		}
		if seen[kind+":"+name] {
			bad("%s %s is described twice", kind, name)
		}
		seen[kind+":"+name] = true
		return true
	}
	for i := range d.Tools {
		t := &d.Tools[i]
		if !claim("tool", t.Name) {
			continue
		}
		switch t.Effect {
		case host.EffectRead, host.EffectWrite, host.EffectExternal:
		case "":
			bad("tool %s: effect is required (read, write or external)", t.Name)
		default:
			bad("tool %s: unknown effect %q", t.Name, t.Effect)
		}
		if t.TimeoutMS < 0 {
			bad("tool %s: negative timeout_ms", t.Name)
		}
		if sidecar {
			if t.Export == "" {
				bad("tool %s: sidecar manifest names no export", t.Name)
			}
		} else if t.Export != "" || t.InputField != "" {
			bad("tool %s: export and input_field are only for sidecar manifests", t.Name)
		}
		if len(bytes.TrimSpace(t.InputSchema)) == 0 || string(t.InputSchema) == "null" {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		sch, err := schema.Compile(t.InputSchema)
		if err != nil {
			bad("tool %s: input_schema: %v", t.Name, err)
			continue
		}
		if err := checkObjectSchema(t.InputSchema); err != nil {
			bad("tool %s: input_schema: %v", t.Name, err)
			continue
		}
		schemas["tool:"+t.Name] = sch
	}
	for i := range d.Validators {
		v := &d.Validators[i]
		if !claim("validator", v.Name) {
			continue
		}
		if len(bytes.TrimSpace(v.Schema)) == 0 || string(v.Schema) == "null" {
			v.Schema = json.RawMessage(`{}`)
		}
		sch, err := schema.Compile(v.Schema)
		if err != nil {
			bad("validator %s: schema: %v", v.Name, err)
			continue
		}
		schemas["validator:"+v.Name] = sch
	}
	for _, p := range d.Policies {
		claim("policy", p.Name)
	}
	if d.Needs != nil {
		if err := d.Needs.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	sort.Slice(d.Tools, func(i, j int) bool { return d.Tools[i].Name < d.Tools[j].Name })
	sort.Slice(d.Validators, func(i, j int) bool { return d.Validators[i].Name < d.Validators[j].Name })
	sort.Slice(d.Policies, func(i, j int) bool { return d.Policies[i].Name < d.Policies[j].Name })
	if d.Tools == nil {
		d.Tools = []ToolDescription{}
	}
	if d.Validators == nil {
		d.Validators = []ValidatorDescription{}
	}
	if d.Policies == nil {
		d.Policies = []PolicyDescription{}
	}
	return schemas, errors.Join(errs...)
}

// spec returns the host's view of a tool.
func (t ToolDescription) spec() host.ToolSpec {
	return host.ToolSpec{
		Name:        t.Name,
		Description: t.Description,
		InputSchema: t.InputSchema,
		Effect:      t.Effect,
		Idempotent:  t.Idempotent,
		Timeout:     time.Duration(t.TimeoutMS) * time.Millisecond,
	}
}

// checkObjectSchema requires {"type":"object"} at the top: tool inputs are
// objects for every provider.
func checkObjectSchema(raw json.RawMessage) error {
	var top struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("not an object schema: %v", err)
	}
	if top.Type != "object" {
		return fmt.Errorf(`must be an object schema ("type": "object")`)
	}
	return nil
}

func oneLine(err error) error {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return errors.New(s)
}
