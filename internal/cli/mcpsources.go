package cli

import (
	"context"
	"flag"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcpclient"
)

// mcpFlags are the flags naming MCP servers whose tools a command takes:
// chat's and task's, and mcp's (a gateway).
type mcpFlags struct {
	urls   pluginList // --mcp NAME=URL
	stdio  pluginList // --mcp-stdio NAME=COMMAND ARGS
	tokens pluginList // --mcp-token-env NAME=VAR
	envs   pluginList // --mcp-env NAME=VAR
	trust  pluginList // --mcp-trust-annotations NAME
}

// register defines the flags on fs; verb says what the command does with
// the servers' tools ("offer", "serve").
func (f *mcpFlags) register(fs *flag.FlagSet, verb string) {
	fs.Var(&f.urls, "mcp", verb+" the tools of the MCP server at `NAME=URL` (streamable HTTP) as NAME__TOOL (repeatable)")
	fs.Var(&f.stdio, "mcp-stdio", "start a local MCP server, `NAME=COMMAND [ARG...]` (split at spaces), and "+verb+" its tools as NAME__TOOL (repeatable); it gets PATH, HOME, LOGNAME, SHELL, TERM and USER of this environment, and what --mcp-env gives it")
	fs.Var(&f.tokens, "mcp-token-env", "send the bearer token in the environment variable VAR to the --mcp server NAME: `NAME=VAR` (repeatable)")
	fs.Var(&f.envs, "mcp-env", "give the --mcp-stdio server NAME the variable VAR of this environment: `NAME=VAR` (repeatable)")
	fs.Var(&f.trust, "mcp-trust-annotations", "take the effects of the MCP server `NAME`'s tools from their annotations (readOnlyHint: read, …), the server's claims; without it every one of its tools is external, and waits for approval (repeatable)")
}

// any reports whether a server is named.
func (f *mcpFlags) any() bool { return len(f.urls)+len(f.stdio) > 0 }

// openMCP opens the MCP servers of --mcp and --mcp-stdio. A server named
// on the command line is the user's choice: its host (any address,
// loopback included) is the only one its requests may reach, a redirect
// elsewhere refused. The first listing of each is trusted (a run of the
// CLI keeps no pins); a definition that changes during the run is held
// and not offered. Their annotations are trusted where
// --mcp-trust-annotations says so.
func (m *modelFlags) openMCP(env Env, logger *slog.Logger) ([]*mcpclient.Source, error) {
	return m.mcp.open(env, logger, nil)
}

// envSpecs reads specs of NAME=VAR (flag names the flag) into the value
// of $VAR by NAME, each of names.
func envSpecs(flag string, specs pluginList, env Env) (map[string][]string, error) {
	out := map[string][]string{}
	for _, t := range specs {
		name, v, ok := strings.Cut(t, "=")
		if !ok || name == "" || v == "" {
			return nil, fail(2, "%s %q: want NAME=VAR", flag, t)
		}
		val := env.Getenv(v)
		if val == "" {
			return nil, fail(2, "%s %s: $%s is not set", flag, name, v)
		}
		out[name] = append(out[name], v+"="+val)
	}
	return out, nil
}

// open opens the MCP servers the flags name, as openMCP says; onChange,
// when set, is told of their changes.
func (f *mcpFlags) open(env Env, logger *slog.Logger, onChange func(mcpclient.Change)) ([]*mcpclient.Source, error) {
	tokens, err := envSpecs("--mcp-token-env", f.tokens, env)
	if err != nil {
		return nil, err
	}
	envs, err := envSpecs("--mcp-env", f.envs, env)
	if err != nil {
		return nil, err
	}
	var servers []mcpclient.Server
	for _, spec := range f.urls {
		name, raw, ok := strings.Cut(spec, "=")
		u, err := url.Parse(raw)
		if !ok || err != nil || u.Host == "" {
			return nil, fail(2, "--mcp %q: want NAME=URL", spec)
		}
		c, err := plugins.EgressClient(plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true})
		if err != nil {
			return nil, fail(2, "--mcp %s: %v", name, err)
		}
		if tok, ok := tokens[name]; ok {
			_, value, _ := strings.Cut(tok[len(tok)-1], "=")
			c = mcpclient.Bearer(c, raw, value)
			delete(tokens, name)
		}
		servers = append(servers, mcpclient.Server{Name: name, URL: raw, HTTPClient: c, Logger: logger, OnChange: onChange})
	}
	for name := range tokens {
		return nil, fail(2, "--mcp-token-env %s: no --mcp server is named %s", name, name)
	}
	for _, spec := range f.stdio {
		name, cmd, ok := strings.Cut(spec, "=")
		if !ok || len(strings.Fields(cmd)) == 0 {
			return nil, fail(2, "--mcp-stdio %q: want NAME=COMMAND [ARG...]", spec)
		}
		servers = append(servers, mcpclient.Server{Name: name, Command: strings.Fields(cmd), Env: envs[name], Stderr: env.Stderr, Logger: logger, OnChange: onChange})
		delete(envs, name)
	}
	for name := range envs {
		return nil, fail(2, "--mcp-env %s: no --mcp-stdio server is named %s", name, name)
	}
	if err := mcpclient.Collisions(servers...); err != nil {
		return nil, fail(2, "--mcp, --mcp-stdio: %v", err)
	}
	for _, name := range f.trust {
		i := slices.IndexFunc(servers, func(s mcpclient.Server) bool { return s.Name == name })
		if i < 0 {
			return nil, fail(2, "--mcp-trust-annotations %s: no --mcp or --mcp-stdio server is named %s", name, name)
		}
		servers[i].TrustAnnotations = true
	}
	var sources []*mcpclient.Source
	closeAll := func() {
		for _, s := range sources {
			s.Close()
		}
	}
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		src, err := mcpclient.Open(ctx, s)
		cancel()
		if err != nil {
			closeAll()
			return nil, fail(2, "--mcp %s: %v", s.Name, err)
		}
		if st := src.Status(); !st.Connected {
			src.Close()
			closeAll()
			return nil, fail(1, "MCP server %s: %s", s.Name, st.LastError)
		}
		sources = append(sources, src)
	}
	return sources, nil
}
