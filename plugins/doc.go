// Package plugins runs sandboxed WebAssembly plugins for agentic-host:
// tools, deliverable validators and approval policies, written in any
// language that compiles to Wasm against the Extism plugin ABI, run on
// wazero through github.com/extism/go-sdk.
//
// # Pieces
//
//   - [Runtime] compiles modules through one shared compilation cache (on
//     disk with Options.CacheDir) and provides the host functions.
//   - [Module] is one compiled, described module bound to a tenant and its
//     [Limits]. It serves its tools as [host.Tool] values, its validators
//     as [host.Validator] and its policies as [host.Policy], from a bounded pool of
//     instances: an Extism plugin instance is not safe for concurrent calls,
//     and one that trapped, timed out or misbehaved is discarded.
//   - [Registry] holds every tenant's modules and serves
//     Toolset(tenant) (a [host.Toolset]), Validator(tenant, name) and
//     Policy(tenant, name). Loads and removals swap an immutable snapshot
//     atomically; readers never lock.
//   - [Registry.Watch] keeps a tenant's modules in sync with a directory
//     (hot reload).
//
// # The ABI
//
// A plugin exports describe, which reports {"abi":"1.x","tools":[…],
// "validators":[…],"policies":[…]}, and call, validate and decide, each
// taking and returning JSON. A plain Extism module without describe is
// usable through a [Sidecar] manifest. The kits in the pdk directory (Go,
// AssemblyScript, C) implement the ABI for plugin authors;
// docs/plugins.md is the author's guide.
//
// # The sandbox
//
// [Limits] are deny-by-default: memory pages, fuel (every module runs
// metered: a call that spends Limits.Fuel fails with [ErrOutOfFuel]), a
// call timeout that holds whatever the guest does (it meets the host at
// least once a slice of fuel, every unit of which is bounded work),
// tables counted as memory, output and input caps; no filesystem and no environment, ever; HTTP only through
// the host's http_request function, to the tenant's allowed hosts, with
// every redirect and the dialled address checked; the tenant's key-value
// store only when enabled. A plugin that traps, loops, runs out of memory
// or output, or answers malformed JSON yields a *[PluginError] (wrapping a
// sentinel such as [ErrTimeout] or [ErrTrap]) and its instance is thrown
// away; the host keeps serving.
//
// Dependencies: this package imports host (for the Tool contract) and
// never the reverse.
package plugins
