package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// Needs: a plugin may say what it needs of the sandbox — the hosts it
// reaches, private networks, the key-value store — in its description
// (describe's "needs", or a sidecar manifest's). A plugin that says runs
// with what it needs and no more, however much its grant (or, without
// grants, its tenant's sandbox) allows; one that needs more than it is
// granted is refused at load, naming what is missing, so an operator
// learns of it then rather than from a denied call. A plugin that says
// nothing gets its grant whole, as before.
//
// What a version needs is part of what it exposes: a version that needs
// a host, private networks or the key-value store its predecessor did not
// (or no longer says, and so takes its whole grant) widens it (see
// [Widenings]), and is held under RegistryOptions.HoldWidening.

// Needs is what a plugin says it needs of its sandbox.
type Needs struct {
	// AllowedHosts are the hosts it reaches, as Limits.AllowedHosts names
	// them: "api.example.com", "api.example.com:8443", "*.example.com".
	AllowedHosts []string `json:"allowed_hosts"`
	// AllowPrivateNetwork: it reaches loopback or private addresses.
	AllowPrivateNetwork bool `json:"allow_private_network,omitempty"`
	// KV: it uses the key-value store.
	KV bool `json:"kv,omitempty"`
}

// validate checks the hosts and normalises nil to empty.
func (n *Needs) validate() error {
	for _, h := range n.AllowedHosts {
		if _, err := parseHostRule(h); err != nil {
			return fmt.Errorf("%w: needs: allowed_hosts: %v", ErrInvalidDescription, err)
		}
	}
	if n.AllowedHosts == nil {
		n.AllowedHosts = []string{}
	}
	return nil
}

// Needing returns l narrowed to what a plugin needs: its hosts (each of
// which l must allow), private networks and the key-value store only if
// it needs them (and l allows them: else an error names what is missing),
// and those of l's secrets whose hosts it still reaches. Every other limit
// stays l's.
func (l Limits) Needing(n Needs) (Limits, error) {
	granted := hostRules(l.AllowedHosts)
	out := l
	out.AllowedHosts = nil
	for _, h := range n.AllowedHosts {
		r, err := parseHostRule(h)
		if err != nil {
			return Limits{}, fmt.Errorf("it needs host %v", err)
		}
		if !coveredBy(granted, r) {
			return Limits{}, fmt.Errorf("it needs host %q, which it is not granted (it may reach %q)", h, l.AllowedHosts)
		}
		out.AllowedHosts = append(out.AllowedHosts, h)
	}
	if n.AllowPrivateNetwork && !l.AllowPrivateNetwork {
		return Limits{}, fmt.Errorf("it needs private networks, which it is not granted")
	}
	if n.KV && !l.KV {
		return Limits{}, fmt.Errorf("it needs the key-value store, which it is not granted")
	}
	out.AllowPrivateNetwork, out.KV = n.AllowPrivateNetwork, n.KV
	reached := hostRules(out.AllowedHosts)
	out.Secrets = nil
	for _, s := range l.Secrets {
		if r, err := parseHostRule(s.Host); err == nil && coveredBy(reached, r) {
			out.Secrets = append(out.Secrets, s)
		}
	}
	return out, nil
}

// needsWidenings returns how next's needs widen prev's: a host prev's do
// not cover, private networks, the key-value store, or needs no longer
// said (the plugin then takes its whole grant).
func needsWidenings(prev, next *Needs) []Widening {
	switch {
	case prev == nil:
		return nil // prev took its whole grant: next can take no more
	case next == nil:
		return []Widening{{Kind: "needs", Name: "*", Change: "undeclared: the whole grant", Old: needsText(prev)}}
	}
	var out []Widening
	had := hostRules(prev.AllowedHosts)
	for _, h := range next.AllowedHosts {
		if r, err := parseHostRule(h); err != nil || !coveredBy(had, r) {
			out = append(out, Widening{Kind: "needs", Name: h, Change: "new host", New: h})
		}
	}
	if next.AllowPrivateNetwork && !prev.AllowPrivateNetwork {
		out = append(out, Widening{Kind: "needs", Name: "private_network", Change: "new"})
	}
	if next.KV && !prev.KV {
		out = append(out, Widening{Kind: "needs", Name: "kv", Change: "new"})
	}
	return out
}

func needsText(n *Needs) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Fingerprint is what a description exposes and needs, as one value:
// "sha256:" and the hex SHA-256 of its canonical JSON (the items sorted by
// name, schemas compacted, the hosts sorted). Two versions with the same
// fingerprint offer the model, the policies and the sandbox the same
// thing, whatever their bytes.
func (d Description) Fingerprint() string {
	c := d
	c.Tools = slices.Clone(d.Tools)
	for i := range c.Tools {
		c.Tools[i].InputSchema = canonicalJSON(c.Tools[i].InputSchema)
	}
	c.Validators = slices.Clone(d.Validators)
	for i := range c.Validators {
		c.Validators[i].Schema = canonicalJSON(c.Validators[i].Schema)
	}
	if d.Needs != nil {
		n := *d.Needs
		n.AllowedHosts = slices.Sorted(slices.Values(n.AllowedHosts))
		c.Needs = &n
	}
	c.ABI = "" // the ABI's minor version changes nothing offered
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonicalJSON is raw re-encoded (members sorted, no spaces); raw itself
// when it is not JSON.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}
