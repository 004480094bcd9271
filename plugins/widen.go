package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Upgrades that widen: a new version of a module may offer what the
// version it would replace did not — a new tool, validator or policy, a
// tool whose effect changed, a changed description or schema (what the
// model and the policies read), a tool now declared idempotent (the host
// may then run again a call whose outcome a crash left unknown), a host
// or store it needs that the old one did not (see [Needs]). Such a
// version is held, not loaded, while the old one serves, until a person
// approves it (RegistryOptions.HoldWidening); one that only narrows (drops
// items, a shorter timeout) or changes nothing a caller sees loads at once.
//
// A tool whose effect drops (external to read) is held too: it would skip
// the approvals its calls had.

// Widening is one way a new version of a module asks for more than the
// version it would replace.
type Widening struct {
	// Kind is "tool", "validator", "policy", or "needs" for what the
	// module needs of its sandbox (see [Needs]).
	Kind string `json:"kind"`
	// Name is the item's name; for needs, the host, "private_network",
	// "kv", or "*" for all of them.
	Name string `json:"name"`
	// Change says what changed: "new", "effect read → external",
	// "description", "input_schema", "schema", "idempotent"; for needs,
	// "new host", "new" or "undeclared: the whole grant".
	Change string `json:"change"`
	// Old and New are the item's old and new text for a changed
	// description, schema or effect.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
}

func (w Widening) String() string {
	return fmt.Sprintf("%s %s: %s", w.Kind, w.Name, w.Change)
}

// Widenings returns how next widens prev (see the package's "Upgrades
// that widen"), in the order of the description (tools, validators,
// policies, each by name); nil when next narrows prev or is the same.
func Widenings(prev, next Description) []Widening {
	var out []Widening
	oldTools := byName(prev.Tools, func(t ToolDescription) string { return t.Name })
	for _, t := range next.Tools {
		o, ok := oldTools[t.Name]
		switch {
		case !ok:
			out = append(out, Widening{Kind: "tool", Name: t.Name, Change: "new", New: string(t.Effect)})
			continue
		case o.Effect != t.Effect:
			out = append(out, Widening{Kind: "tool", Name: t.Name, Change: fmt.Sprintf("effect %s → %s", o.Effect, t.Effect), Old: string(o.Effect), New: string(t.Effect)})
		}
		if o.Description != t.Description {
			out = append(out, Widening{Kind: "tool", Name: t.Name, Change: "description", Old: o.Description, New: t.Description})
		}
		if !sameJSON(o.InputSchema, t.InputSchema) {
			out = append(out, Widening{Kind: "tool", Name: t.Name, Change: "input_schema", Old: string(o.InputSchema), New: string(t.InputSchema)})
		}
		if t.Idempotent && !o.Idempotent {
			out = append(out, Widening{Kind: "tool", Name: t.Name, Change: "idempotent"})
		}
	}
	oldValidators := byName(prev.Validators, func(v ValidatorDescription) string { return v.Name })
	for _, v := range next.Validators {
		o, ok := oldValidators[v.Name]
		switch {
		case !ok:
			out = append(out, Widening{Kind: "validator", Name: v.Name, Change: "new"})
			continue
		case o.Description != v.Description:
			out = append(out, Widening{Kind: "validator", Name: v.Name, Change: "description", Old: o.Description, New: v.Description})
		}
		if !sameJSON(o.Schema, v.Schema) {
			out = append(out, Widening{Kind: "validator", Name: v.Name, Change: "schema", Old: string(o.Schema), New: string(v.Schema)})
		}
	}
	oldPolicies := byName(prev.Policies, func(p PolicyDescription) string { return p.Name })
	for _, p := range next.Policies {
		o, ok := oldPolicies[p.Name]
		switch {
		case !ok:
			out = append(out, Widening{Kind: "policy", Name: p.Name, Change: "new"})
		case o.Description != p.Description:
			out = append(out, Widening{Kind: "policy", Name: p.Name, Change: "description", Old: o.Description, New: p.Description})
		}
	}
	return append(out, needsWidenings(prev.Needs, next.Needs)...)
}

// byName indexes items by their names.
func byName[T any](items []T, name func(T) string) map[string]T {
	out := make(map[string]T, len(items))
	for _, x := range items {
		out[name(x)] = x
	}
	return out
}

// sameJSON reports whether two JSON texts are the same value, whitespace
// and the order of object members aside ("" and absent are the same).
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}
