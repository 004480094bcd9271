package plugins

import (
	"fmt"
	"slices"
	"strings"
)

// Grants per plugin: a tenant's sandbox (its Limits) is the ceiling of
// what its plugins may do. With RegistryOptions.Grants, each module gets
// only what is granted to it by name: the hosts it may reach (each within
// the tenant's AllowedHosts), private networks and the key-value store
// (each only if the tenant has them). A module granted nothing gets
// nothing — no HTTP, no key-value store — whatever its tenant may do.

// Grant is what one plugin may do of its tenant's sandbox.
type Grant struct {
	// AllowedHosts are the hosts it may reach, as Limits.AllowedHosts
	// names them; each must be within the tenant's.
	AllowedHosts []string `json:"allowed_hosts"`
	// AllowPrivateNetwork lets it reach non-public addresses, if the
	// tenant may.
	AllowPrivateNetwork bool `json:"allow_private_network"`
	// KV lets it use the key-value store, if the tenant may.
	KV bool `json:"kv"`
	// Secrets are credentials the host adds to its requests to their
	// hosts (see [EgressSecret]), each host among its AllowedHosts.
	Secrets []EgressSecret `json:"secrets,omitempty"`
}

// GrantOf returns what l lets a plugin do, as a Grant.
func GrantOf(l Limits) Grant {
	return Grant{AllowedHosts: slices.Clone(l.AllowedHosts), AllowPrivateNetwork: l.AllowPrivateNetwork, KV: l.KV, Secrets: slices.Clone(l.Secrets)}
}

// Within returns l narrowed to what g grants: g's hosts, each of which l
// must allow (else an error names it), private networks and the key-value
// store only where both allow them. Every other limit stays l's.
func (l Limits) Within(g Grant) (Limits, error) {
	ceiling := hostRules(l.AllowedHosts)
	out := l
	out.AllowedHosts = nil
	for _, h := range g.AllowedHosts {
		r, err := parseHostRule(h)
		if err != nil {
			return Limits{}, fmt.Errorf("plugins: granted host: %v", err)
		}
		if !coveredBy(ceiling, r) {
			return Limits{}, fmt.Errorf("plugins: granted host %q is not among the tenant's allowed hosts %q", h, l.AllowedHosts)
		}
		out.AllowedHosts = append(out.AllowedHosts, h)
	}
	out.AllowPrivateNetwork = l.AllowPrivateNetwork && g.AllowPrivateNetwork
	out.KV = l.KV && g.KV
	if err := checkSecrets(g.Secrets, out.AllowedHosts); err != nil {
		return Limits{}, fmt.Errorf("plugins: granted %v", err)
	}
	out.Secrets = slices.Clone(g.Secrets)
	return out, nil
}

// covers reports whether every host and port g matches, r matches too:
// a wildcard covers its subdomains (and wildcards of theirs), a rule with
// a port that port only, and a rule without one only rules without one
// (the schemes' default ports: "h:443" admits http://h:443, which "h"
// does not).
func (r hostRule) covers(g hostRule) bool {
	if r.port != g.port {
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(g.host, "."+r.host)
	}
	return !g.wildcard && g.host == r.host
}

// hostRules parses AllowedHosts entries (Limits.Validate refuses the bad
// ones; here they are skipped).
func hostRules(hosts []string) []hostRule {
	var out []hostRule
	for _, h := range hosts {
		if r, err := parseHostRule(h); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// coveredBy reports whether one of rules covers r.
func coveredBy(rules []hostRule, r hostRule) bool {
	return slices.ContainsFunc(rules, func(c hostRule) bool { return c.covers(r) })
}
