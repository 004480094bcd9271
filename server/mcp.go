package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcpclient"
)

// MCP servers as tool sources: a tenant's mcp_servers are MCP servers
// (streamable HTTP; a tenant cannot start processes) whose tools its
// agents take (protocol/mcpclient), under SERVER__TOOL. Each server's URL
// (and OAuth token endpoint) must be among the tenant's
// sandbox.allowed_hosts: the requests go through the sandbox's HTTP client
// (plugins.EgressClient), every redirect and dialled address checked. The
// credentials are the host's: the model, the ledger, the answers and the
// logs never see them. The definitions trusted (the rug-pull guard's
// pins) are kept in the storage, so that a definition that changed while
// every host was down is held at the next start; GET /v1/mcp lists the
// servers and their held tools, POST /v1/mcp/{server}/tools/{tool}/approve
// serves one; both are in the audit log (plugin "mcp:SERVER").

// MCPServerConfig is an MCP server whose tools a tenant's agents take.
type MCPServerConfig struct {
	// Name names the server; its tools are NAME__TOOL to the model.
	// Required: 1 to 32 of [A-Za-z0-9_-].
	Name string `yaml:"name"`
	// URL is its streamable HTTP endpoint, among the tenant's
	// sandbox.allowed_hosts. Required.
	URL string `yaml:"url"`
	// Prefix comes before its tools' names. Default: NAME__.
	Prefix string `yaml:"prefix"`
	// Timeout bounds a call of its tools. Default: 0, the agent's tool
	// timeout.
	Timeout Duration `yaml:"timeout"`
	// MaxOutputBytes caps a call's output. Default: 0, 64 KiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// MaxMessageBytes bounds one answer of the server (a JSON body, one
	// SSE event), enforced as it is read: past it the call or the listing
	// fails (mcpclient.ErrTooLarge) and the connection is made again.
	// Default: 0, 4 MiB.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxTools bounds the tools the server lists: a listing of more is
	// refused whole (none of its tools serves; GET /v1/mcp says why).
	// Default: 0, 128.
	MaxTools int `yaml:"max_tools"`
	// MaxDefinitionBytes bounds a tool's definition (name, description,
	// input schema, annotations, as JSON): a larger one is refused, the
	// others serve (GET /v1/mcp lists it under refused). Default: 0,
	// 32 KiB.
	MaxDefinitionBytes int `yaml:"max_definition_bytes"`
	// Credential is a header the host adds to the requests to the server:
	// header (Authorization by default), scheme (bearer, basic or none)
	// and the value's source (value, value_env or value_file), as
	// sandbox.secrets take them. Default: none.
	Credential *SecretConfig `yaml:"credential"`
	// OAuth gets an access token with the client-credentials grant.
	// Default: none.
	OAuth *OAuthConfig `yaml:"oauth"`
	// Tools overrides the annotations, by the server's tool name.
	Tools map[string]MCPToolConfig `yaml:"tools"`
	// TrustAnnotations takes each tool's effect and idempotence from its
	// annotations, which are the server's claims (a destructive tool may
	// claim readOnlyHint). Default: false: every tool is external, and
	// waits for approval, unless tools says otherwise.
	TrustAnnotations bool `yaml:"trust_annotations"`
	// TrustChanges serves a tool whose definition changed, and a new
	// tool, without approval. Default: false (they are held).
	TrustChanges bool `yaml:"trust_changes"`
}

// OAuthConfig is an OAuth 2.0 client-credentials grant.
type OAuthConfig struct {
	// TokenURL is the token endpoint, among the tenant's
	// sandbox.allowed_hosts. Required.
	TokenURL string `yaml:"token_url"`
	// ClientID is the client's id. Required.
	ClientID string `yaml:"client_id"`
	// The client secret's source: exactly one.
	ClientSecret     string `yaml:"client_secret"`
	ClientSecretEnv  string `yaml:"client_secret_env"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// Scopes are the scopes asked for. Default: none.
	Scopes []string `yaml:"scopes"`

	secret string // once read
}

// MCPToolConfig overrides what a tool's annotations say.
type MCPToolConfig struct {
	// Effect is read, write or external. Default: from the annotations.
	Effect string `yaml:"effect"`
	// Idempotent, when set, overrides idempotentHint.
	Idempotent *bool `yaml:"idempotent"`
	// Timeout bounds one call. Default: the server's timeout.
	Timeout Duration `yaml:"timeout"`
}

// validate checks an MCP server's configuration against its tenant's
// sandbox, and reads its secrets.
func (m *MCPServerConfig) validate(sandbox plugins.Limits, getenv func(string) string) []string {
	var bad []string
	if m.URL == "" {
		bad = append(bad, "url is required")
	} else if sandbox.Allows(m.URL) != nil {
		bad = append(bad, fmt.Sprintf("the host of url %s is not among the tenant's sandbox.allowed_hosts", redactURL(m.URL)))
	}
	if m.Credential != nil {
		if err := m.Credential.resolve(getenv); err != nil {
			bad = append(bad, "credential: "+err.Error())
		}
	}
	if o := m.OAuth; o != nil {
		if o.TokenURL == "" || o.ClientID == "" {
			bad = append(bad, "oauth: token_url and client_id are required")
		} else if sandbox.Allows(o.TokenURL) != nil {
			bad = append(bad, fmt.Sprintf("oauth: the host of token_url %s is not among the tenant's sandbox.allowed_hosts", redactURL(o.TokenURL)))
		}
		secret := SecretConfig{Value: o.ClientSecret, ValueEnv: o.ClientSecretEnv, ValueFile: o.ClientSecretFile}
		if err := secret.resolve(getenv); err != nil {
			bad = append(bad, "oauth: the client secret: "+strings.NewReplacer("value_env", "client_secret_env", "value_file", "client_secret_file", "value", "client_secret").Replace(err.Error()))
		}
		o.secret = secret.resolved
	}
	if m.Credential != nil && m.OAuth != nil {
		bad = append(bad, "credential and oauth: want one of them")
	}
	if _, err := m.server(nil); err != nil {
		bad = append(bad, err.Error())
	}
	return bad
}

// mcpCollisions names the tenant's MCP servers whose tools could take one
// name (mcpclient.Collisions), each server name once.
func mcpCollisions(servers []MCPServerConfig) []string {
	var cs []mcpclient.Server
	seen := map[string]bool{}
	for _, m := range servers {
		if !seen[m.Name] {
			seen[m.Name] = true
			cs = append(cs, mcpclient.Server{Name: m.Name, Prefix: m.Prefix})
		}
	}
	var out []string
	if err, ok := mcpclient.Collisions(cs...).(interface{ Unwrap() []error }); ok {
		for _, e := range err.Unwrap() {
			out = append(out, strings.TrimPrefix(e.Error(), mcpclient.ErrInvalidServer.Error()+": "))
		}
	}
	return out
}

// redactURL is a URL without its query and credentials.
func redactURL(raw string) string {
	i := strings.IndexAny(raw, "?#")
	if i >= 0 {
		raw = raw[:i]
	}
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if at := strings.LastIndex(strings.SplitN(rest, "/", 2)[0], "@"); at >= 0 {
			raw = scheme + "://" + rest[at+1:]
		}
	}
	return raw
}

// server is the mcpclient configuration of m, its requests made by c.
func (m MCPServerConfig) server(c *http.Client) (mcpclient.Server, error) {
	s := mcpclient.Server{Name: m.Name, URL: m.URL, Prefix: m.Prefix, Timeout: time.Duration(m.Timeout),
		MaxOutputBytes: m.MaxOutputBytes, MaxMessageBytes: m.MaxMessageBytes,
		MaxTools: m.MaxTools, MaxDefinitionBytes: m.MaxDefinitionBytes, TrustChanges: m.TrustChanges, TrustAnnotations: m.TrustAnnotations, HTTPClient: c}
	if len(m.Tools) > 0 {
		s.Tools = map[string]mcpclient.ToolOverride{}
		for name, t := range m.Tools {
			s.Tools[name] = mcpclient.ToolOverride{Effect: host.Effect(t.Effect), Idempotent: t.Idempotent, Timeout: time.Duration(t.Timeout)}
		}
	}
	if err := s.Validate(); err != nil {
		return s, errors.New(strings.ReplaceAll(err.Error(), mcpclient.ErrInvalidServer.Error()+" ", ""))
	}
	return s, nil
}

// mcpPinsNamespace is where a tenant's trusted MCP tool definitions are
// kept, by server name.
func mcpPinsNamespace(tenant string) string { return "agentic:mcp-pins:" + tenant }

// openMCP opens the tenant's MCP servers, within ctx for their first
// connections (a server down is retried in the background).
func (s *Server) openMCP(ctx context.Context, t *tenant) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	t.mcp = map[string]*mcpclient.Source{}
	for _, mc := range t.cfg.MCPServers {
		c, err := plugins.EgressClient(t.cfg.Sandbox.limits())
		if err != nil {
			return fmt.Errorf("server: tenant %s: mcp_servers %s: %w", t.name, mc.Name, err)
		}
		switch {
		case mc.Credential != nil:
			c = mcpclient.Header(c, mc.URL, mc.Credential.Header, mc.Credential.resolved)
		case mc.OAuth != nil:
			c = mcpclient.ClientCredentials(c, mc.URL, clientcredentials.Config{ClientID: mc.OAuth.ClientID, ClientSecret: mc.OAuth.secret,
				TokenURL: mc.OAuth.TokenURL, Scopes: mc.OAuth.Scopes})
		}
		cfg, err := mc.server(c)
		if err != nil {
			return fmt.Errorf("server: tenant %s: mcp_servers %s: %w", t.name, mc.Name, err)
		}
		cfg.Logger = s.log.With("tenant", t.name)
		b, ok, err := s.kv.Get(ctx, mcpPinsNamespace(t.name), mc.Name)
		if err != nil {
			return fmt.Errorf("server: tenant %s: mcp_servers %s: reading its trusted definitions: %w", t.name, mc.Name, err)
		}
		if ok {
			// A first use was recorded: what cannot be read of it trusts
			// nothing (every tool held), never everything.
			if err := json.Unmarshal(b, &cfg.Pins); err != nil || cfg.Pins == nil {
				s.log.Error("an MCP server's trusted tool definitions cannot be read: every tool it lists is held until a person approves it",
					"tenant", t.name, "server", mc.Name, "err", err)
				cfg.Pins = map[string]string{}
			}
		}
		tenant, name := t.name, mc.Name
		cfg.OnChange = func(c mcpclient.Change) { s.onMCPChange(tenant, name, c) }
		wg.Go(func() {
			src, err := mcpclient.Open(ctx, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("server: tenant %s: mcp_servers %s: %w", tenant, name, err))
				return
			}
			t.mcp[name] = src
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// onMCPChange keeps the trusted definitions and audits held and approved
// tools. A server whose definitions flap is audited boundedly: the Source
// tells a definition held again once, and a tool (or a server) that
// keeps changing a few times, then as flapping, then no more until an
// approval (mcpclient.Flapping).
func (s *Server) onMCPChange(tenant, server string, c mcpclient.Change) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.Pins != nil {
		b, _ := json.Marshal(c.Pins)
		if err := s.kv.Set(ctx, mcpPinsNamespace(tenant), server, b); err != nil {
			s.log.Error("cannot keep an MCP server's trusted tool definitions", "tenant", tenant, "server", server, "err", err)
		}
	}
	e := auditEntry{Plugin: "mcp:" + server}
	switch c.Kind {
	case mcpclient.Held:
		e.Action, e.By, e.Hash = "held", "host", c.Held.Digest
		e.Detail = "tool " + c.Tool + ": new"
		if c.Held.Old != nil {
			e.Detail = "tool " + c.Tool + ": its definition changed"
		}
	case mcpclient.Flapping:
		// The definitions held next get no entry of their own until one
		// is approved: a server flapping cannot fill the log.
		e.Action, e.By = "held", "host"
		if c.Held != nil {
			e.Hash = c.Held.Digest
			e.Detail = "tool " + c.Tool + ": its definition keeps changing: the definitions held next get no entry until one is approved"
		} else {
			e.Detail = "the server keeps offering new or changed tools: the definitions held next get no entry until one is approved"
		}
	case mcpclient.Approved:
		e.Action, e.Hash = "approved", c.Held.Digest
		e.Detail = "tool " + c.Tool
		e.By = s.audit.actor(tenant, "mcp:"+server)
	default:
		return
	}
	if err := s.audit.record(ctx, tenant, e); err != nil {
		s.log.Error("cannot write the audit log", "tenant", tenant, "plugin", e.Plugin, "action", e.Action, "err", err)
	}
}

// mcpTools offers the tools of a tenant's MCP servers, or of some of them.
type mcpTools struct {
	t    *tenant
	only []string // server names; none: every server
}

func (m mcpTools) Tools() []host.Tool {
	var out []host.Tool
	for _, name := range sortedKeys(m.t.mcp) {
		if len(m.only) == 0 || slices.Contains(m.only, name) {
			out = append(out, m.t.mcp[name].Tools()...)
		}
	}
	return out
}

// mcpServerInfo is a server as GET /v1/mcp lists it.
type mcpServerInfo struct {
	mcpclient.Status
	// URL is the server's, without its query.
	URL string `json:"url"`
	// Tools are the tools it serves, as the model names them.
	Tools []string `json:"tools"`
	// Held are the definitions waiting for approval.
	Held []mcpclient.HeldTool `json:"held"`
}

// listMCP lists the tenant's MCP servers.
func (s *Server) listMCP(w http.ResponseWriter, r *http.Request, t *tenant) {
	out := struct {
		Servers []mcpServerInfo `json:"servers"`
	}{Servers: []mcpServerInfo{}}
	for _, mc := range t.cfg.MCPServers {
		src := t.mcp[mc.Name]
		if src == nil {
			continue
		}
		info := mcpServerInfo{Status: src.Status(), URL: redactURL(mc.URL), Tools: []string{}, Held: append([]mcpclient.HeldTool{}, src.Held()...)}
		for _, tl := range src.Tools() {
			info.Tools = append(info.Tools, tl.Spec().Name)
		}
		out.Servers = append(out.Servers, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// approveMCPTool serves a held definition of an MCP server's tool.
func (s *Server) approveMCPTool(w http.ResponseWriter, r *http.Request, t *tenant) {
	server, tool := r.PathValue("server"), r.PathValue("tool")
	var req struct {
		// Digest is the definition approved: the one shown.
		Digest string `json:"digest"`
	}
	// The body first, within the server's body limits, whatever the
	// answer.
	if !s.decodeBody(w, r, &req) {
		return
	}
	src := t.mcp[server]
	if src == nil {
		notFound(w, "MCP server", server)
		return
	}
	if req.Digest == "" {
		writeError(w, http.StatusBadRequest, codeInvalid, `field "digest" is required: the held definition's digest, as GET /v1/mcp shows it`)
		return
	}
	var err error
	s.audit.act(t.name, "mcp:"+server, keyActor(r), func() { err = src.Approve(tool, req.Digest) })
	if err != nil {
		notFound(w, "held definition of MCP tool "+server+"/"+tool, req.Digest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// closeMCP closes the tenant's MCP servers.
func (t *tenant) closeMCP() {
	for _, src := range t.mcp {
		src.Close()
	}
}
