// Package mcp speaks the Model Context Protocol: it serves a tenant's
// plugin tools to any MCP client (Claude Desktop, Codex, IDEs, agent
// frameworks), over stdio or streamable HTTP, with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk v1.8.0). It implements the
// specification's revision 2025-11-25, and negotiates the revisions that
// SDK knows (2024-11-05 to 2026-07-28) with older and newer clients. It is
// a translation between the host's types and the wire: `agentic-host mcp`
// wires it to a registry and a listener; the coming MCP client lands here
// too.
//
// A [Server] takes a [plugins.Registry] and a tenant. Every tool the
// registry serves the tenant is an MCP tool: its name, description and
// input schema as the plugin describes them, annotations derived from its
// effect, and the module that serves it in the tool's _meta. Calls run in
// the registry's sandbox, with the tenant's limits and key-value store, on
// the module version the call started on. When the registry changes
// ([Server.Changed], wired to [plugins.RegistryOptions.OnChange]), the tool
// list follows and connected clients get notifications/tools/list_changed.
//
// Before a call runs, a [Policy] decides: allow, deny (a tool error with the
// policy's reason) or require approval, which asks the person at the client
// through MCP elicitation when the client supports it, and otherwise refuses
// with a message that says how to approve the tool ([Options.Approve]).
//
// A plugin's failure (timeout, trap, out of memory, output too large…) is a
// tool error whose text and _meta name its kind; a malformed JSON-RPC
// message gets a JSON-RPC error. Neither stops the server.
//
// The package is written so that a multi-tenant server can mount one Server
// per tenant ([Server.Handler] is an http.Handler).
package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sort"
	"sync"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Keys of the _meta the server adds to tools and results. They name the
// module behind a tool (its content hash, "sha256:…"), the plugin (module
// name), the tool's declared effect, and the kind of a failed call.
const (
	// MetaModule is the content hash of the module serving a tool, or
	// that served a call.
	MetaModule = "agentic-host/module"
	// MetaPlugin is the module's name (its file name without .wasm).
	MetaPlugin = "agentic-host/plugin"
	// MetaEffect is the tool's declared effect: read, write or external.
	MetaEffect = "agentic-host/effect"
	// MetaError is the kind of a failed call (KindTimeout, KindTrap…).
	MetaError = "agentic-host/error"
)

// Options configures a [Server].
type Options struct {
	// Registry serves the tools. Required.
	Registry *plugins.Registry
	// Tenant is the tenant whose tools are served. Required.
	Tenant string
	// Policy decides whether a call may run. Default: nil, [ByEffect]
	// (read and write allowed, external requires approval).
	Policy Policy
	// Approve names tools whose calls run without asking when the policy
	// requires approval (the operator approves them once for all). A
	// denial is never overridden. Default: none.
	Approve []string
	// Name and Version are the server's name and version in the MCP
	// handshake. Default: "agentic-host", and the module version of the
	// binary ("(devel)" when built from a checkout).
	Name, Version string
	// Instructions are the server's instructions to clients. Default: none.
	Instructions string
	// Logger receives the server's log: decisions, refusals, protocol
	// problems. Default: nil, no log.
	Logger *slog.Logger
	// Toolsets are tools served beside the registry's (the tools of other
	// MCP servers, through protocol/mcpclient, or Go tools), under their
	// own names: a name a plugin of the registry serves too is the
	// plugin's. Call [Server.Sync] when one's tools change. Default: none.
	Toolsets []host.Toolset
	// StateKey signs the state an approval round trip carries through the
	// client (MCP multi round-trip requests), so that an approval given for
	// one call cannot be replayed for another. Servers that share clients
	// (behind one load balancer) must share it. Default: nil, a random key
	// per Server.
	StateKey []byte
}

// Server serves a tenant's plugin tools over MCP. Its methods are safe for
// concurrent use.
type Server struct {
	reg      *plugins.Registry
	toolsets []host.Toolset
	tenant   string
	policy   Policy
	approve  map[string]bool
	log      *slog.Logger
	key      []byte
	sdk      *sdk.Server

	mu    sync.Mutex
	tools map[string][]byte // name → the MCP definition served, JSON
}

// New returns a Server over opts.Registry serving opts.Tenant's current
// tools. Wire [Server.Changed] to the registry's OnChange so that the
// tools follow hot reloads.
func New(opts Options) (*Server, error) {
	var errs []error
	if opts.Registry == nil {
		errs = append(errs, errors.New("mcp: Options.Registry is required"))
	}
	if opts.Tenant == "" {
		errs = append(errs, errors.New("mcp: Options.Tenant is required"))
	}
	for _, name := range opts.Approve {
		if !host.ValidToolName(name) {
			errs = append(errs, fmt.Errorf("mcp: Options.Approve: %q is not a tool name", name))
		}
	}
	if opts.StateKey != nil && len(opts.StateKey) < 16 {
		errs = append(errs, errors.New("mcp: Options.StateKey must be at least 16 bytes"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Policy == nil {
		opts.Policy = ByEffect
	}
	if opts.Name == "" {
		opts.Name = "agentic-host"
	}
	if opts.Version == "" {
		opts.Version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			opts.Version = bi.Main.Version
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StateKey == nil {
		opts.StateKey = make([]byte, 32)
		rand.Read(opts.StateKey)
	}
	s := &Server{
		reg:      opts.Registry,
		toolsets: slices.Clone(opts.Toolsets),
		tenant:   opts.Tenant,
		policy:   opts.Policy,
		approve:  map[string]bool{},
		log:      opts.Logger,
		key:      bytes.Clone(opts.StateKey),
		tools:    map[string][]byte{},
	}
	for _, name := range opts.Approve {
		s.approve[name] = true
	}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: opts.Name, Version: opts.Version}, &sdk.ServerOptions{
		Instructions: opts.Instructions,
		Logger:       opts.Logger,
		// The tools capability (with list_changed) even while the
		// directory offers none yet; no logging capability.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	s.sync()
	return s, nil
}

// Changed brings the tool list up to date after a change of the registry;
// connected clients get notifications/tools/list_changed when the tools
// they see changed (a tool added, removed, or served by another module
// version). Changes of other tenants are ignored. It does not block: call
// it from [plugins.RegistryOptions.OnChange].
func (s *Server) Changed(c plugins.Change) {
	if c.Tenant != s.tenant {
		return
	}
	s.sync()
}

// Sync makes the tools served those of the registry and the toolsets now
// (Changed does for the registry's changes): call it when a toolset's
// tools change.
func (s *Server) Sync() { s.sync() }

// Tools returns the names of the tools served, sorted.
func (s *Server) Tools() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.tools))
	for n := range s.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sync makes the MCP server's tools those the registry serves the tenant
// now. The SDK sends list_changed (debounced) for every tool added or
// removed; a tool whose definition is unchanged is left alone.
func (s *Server) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := s.definitions()
	for name, t := range want {
		raw, err := json.Marshal(t)
		if err != nil {
			s.log.Error("mcp: encoding a tool definition", "tool", name, "err", err)
			continue
		}
		if old, ok := s.tools[name]; ok && bytes.Equal(old, raw) {
			continue
		}
		if err := s.add(t); err != nil {
			s.log.Error("mcp: the SDK refused a tool; it is not served", "tool", name, "err", err)
			delete(s.tools, name)
			continue
		}
		s.tools[name] = raw
	}
	var gone []string
	for name := range s.tools {
		if want[name] == nil {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		s.sdk.RemoveTools(gone...)
		for _, name := range gone {
			delete(s.tools, name)
		}
	}
}

// add adds or replaces a tool; the SDK panics on a definition it cannot
// serve, which is an error here.
func (s *Server) add(t *sdk.Tool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	s.sdk.AddTool(t, s.handler(t.Name))
	return nil
}

// definitions returns the MCP definitions of the tools the registry
// serves the tenant, by name.
func (s *Server) definitions() map[string]*sdk.Tool {
	out := map[string]*sdk.Tool{}
	for _, m := range s.reg.Modules(s.tenant) {
		for _, td := range m.Description().Tools {
			t, ok := s.reg.Tool(s.tenant, td.Name)
			if !ok {
				continue // withheld: a name conflict
			}
			out[td.Name] = definition(t.Spec(), m)
		}
	}
	for _, ts := range s.toolsets {
		for _, t := range ts.Tools() {
			if spec := t.Spec(); out[spec.Name] == nil {
				out[spec.Name] = definition(spec, nil)
			}
		}
	}
	return out
}

// tool is the tool name as a call resolves it: the registry's, else a
// toolset's.
func (s *Server) tool(name string) (host.Tool, bool) {
	if t, ok := s.reg.Tool(s.tenant, name); ok {
		return t, true
	}
	for _, ts := range s.toolsets {
		for _, t := range ts.Tools() {
			if t.Spec().Name == name {
				return t, true
			}
		}
	}
	return nil, false
}

// definition is a tool's MCP definition. Annotations follow its effect:
//
//	read      readOnlyHint
//	write     destructiveHint (the ABI does not tell additive writes from overwrites)
//	external  destructiveHint, openWorldHint
//
// openWorldHint is also set for read and write tools whose sandbox lets
// them reach HTTP hosts; idempotentHint is the plugin's own declaration.
// A toolset's tool (m nil) carries no module in its _meta.
func definition(spec host.ToolSpec, m *plugins.Module) *sdk.Tool {
	schema := json.RawMessage(spec.InputSchema)
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	effect := spec.Effect
	if effect == "" {
		effect = host.EffectRead
	}
	yes, no := true, false
	open := &no
	if effect == host.EffectExternal || m != nil && len(m.Limits().AllowedHosts) > 0 {
		open = &yes
	}
	a := &sdk.ToolAnnotations{IdempotentHint: spec.Idempotent, OpenWorldHint: open}
	switch effect {
	case host.EffectRead:
		a.ReadOnlyHint = true
		a.DestructiveHint = &no
	default:
		a.DestructiveHint = &yes
	}
	meta := sdk.Meta{MetaEffect: string(effect)}
	if m != nil {
		meta[MetaModule], meta[MetaPlugin] = m.Hash(), m.Name()
	}
	return &sdk.Tool{
		Name:        spec.Name,
		Description: spec.Description,
		InputSchema: schema,
		Annotations: a,
		Meta:        meta,
	}
}

// Close ends every session connected now: calls in flight finish, then
// each session's connection (its event streams too) closes. Stop the
// transport from accepting new sessions first (http.Server.Shutdown runs
// well beside Close: the streams Close ends are what Shutdown waits for).
func (s *Server) Close() error {
	var errs []error
	for ss := range s.sdk.Sessions() {
		if err := ss.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
