package plugins

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentichost/agentic/host"
)

// PolicyRef is a policy of one of a tenant's plugins, named rather than
// held: it is looked up in the registry at every decision, so that it
// follows hot reloads. A decision while it is not served (its module
// unloaded, refused, or in a name conflict) fails, and a failed decision
// requires approval.
type PolicyRef struct {
	// Registry serves the policy.
	Registry *Registry
	// Tenant is the tenant whose plugin it is.
	Tenant string
	// Module is the plugin's module name (its file name without .wasm).
	Module string
	// Policy is the policy's name. Default: "", the module's only policy.
	Policy string
}

// Name names the policy: MODULE, or MODULE:POLICY.
func (p PolicyRef) Name() string {
	if p.Policy == "" {
		return p.Module
	}
	return p.Module + ":" + p.Policy
}

// Resolve returns the policy as the registry serves it now, or why it is
// not served. Check a policy with it once the plugins are loaded.
func (p PolicyRef) Resolve() (host.Policy, error) {
	m, ok := p.Registry.Module(p.Tenant, p.Module)
	if !ok {
		return nil, fmt.Errorf("no plugin %q is loaded for tenant %s", p.Module, p.Tenant)
	}
	var names []string
	for _, d := range m.Description().Policies {
		names = append(names, d.Name)
	}
	name := p.Policy
	switch {
	case len(names) == 0:
		return nil, fmt.Errorf("plugin %s offers no policy", p.Module)
	case name == "" && len(names) == 1:
		name = names[0]
	case name == "":
		return nil, fmt.Errorf("plugin %s offers %d policies (%s): name one as %s:NAME", p.Module, len(names), strings.Join(names, ", "), p.Module)
	case !slices.Contains(names, name):
		return nil, fmt.Errorf("plugin %s offers no policy %q (it offers: %s)", p.Module, name, strings.Join(names, ", "))
	}
	pol, ok := p.Registry.Policy(p.Tenant, name)
	if !ok {
		return nil, fmt.Errorf("policy %s of plugin %s is not served: another plugin of the tenant offers a policy of that name too", name, p.Module)
	}
	return pol, nil
}

// Decide resolves the policy and asks it.
func (p PolicyRef) Decide(ctx context.Context, req host.PolicyRequest) (host.Decision, error) {
	pol, err := p.Resolve()
	if err != nil {
		return host.Decision{}, err
	}
	return pol.Decide(ctx, req)
}

// Metered reports true: a plugin's decisions are metered, and carry the
// fuel they used (host.Decision.Fuel).
func (p PolicyRef) Metered() bool { return true }

var _ host.Policy = PolicyRef{}
