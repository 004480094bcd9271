package cli

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcpclient"
)

// openMCP opens the MCP servers of --mcp and --mcp-stdio. A server named
// on the command line is the user's choice: its host (any address,
// loopback included) is the only one its requests may reach, a redirect
// elsewhere refused. The first listing of each is trusted (a run of the
// CLI keeps no pins); a definition that changes during the run is held
// and not offered.
func (m *modelFlags) openMCP(env Env, logger *slog.Logger) ([]*mcpclient.Source, error) {
	return openMCPSources(m.mcpURLs, m.mcpStdio, m.mcpTokens, env, logger, nil)
}

// openMCPSources opens the MCP servers of --mcp (NAME=URL), --mcp-stdio
// (NAME=COMMAND ARGS) and --mcp-token-env (NAME=VAR), as openMCP says;
// onChange, when set, is told of their changes.
func openMCPSources(urls, stdio, tokenSpecs pluginList, env Env, logger *slog.Logger, onChange func(mcpclient.Change)) ([]*mcpclient.Source, error) {
	tokens := map[string]string{}
	for _, t := range tokenSpecs {
		name, v, ok := strings.Cut(t, "=")
		if !ok || name == "" || v == "" {
			return nil, fail(2, "--mcp-token-env %q: want NAME=VAR", t)
		}
		tok := env.Getenv(v)
		if tok == "" {
			return nil, fail(2, "--mcp-token-env %s: $%s is not set", name, v)
		}
		tokens[name] = tok
	}
	var servers []mcpclient.Server
	for _, spec := range urls {
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
			c = mcpclient.Bearer(c, raw, tok)
			delete(tokens, name)
		}
		servers = append(servers, mcpclient.Server{Name: name, URL: raw, HTTPClient: c, Logger: logger, OnChange: onChange})
	}
	for name := range tokens {
		return nil, fail(2, "--mcp-token-env %s: no --mcp server is named %s", name, name)
	}
	for _, spec := range stdio {
		name, cmd, ok := strings.Cut(spec, "=")
		if !ok || len(strings.Fields(cmd)) == 0 {
			return nil, fail(2, "--mcp-stdio %q: want NAME=COMMAND [ARG...]", spec)
		}
		servers = append(servers, mcpclient.Server{Name: name, Command: strings.Fields(cmd), Stderr: env.Stderr, Logger: logger, OnChange: onChange})
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
