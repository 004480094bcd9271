package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
	"github.com/agentichost/agentic/protocol/mcpclient"
	"github.com/agentichost/agentic/storage"
)

// mcpKeyEnv is the environment variable --http reads its API key from
// unless --api-key-env names another.
const mcpKeyEnv = "AGENTIC_MCP_API_KEY"

// mcpIdleTimeout is the default of mcp --idle-timeout.
const mcpIdleTimeout = 2 * time.Minute

// mcpPath is where --http serves MCP.
const mcpPath = "/mcp"

const mcpUsage = `Usage: agentic-host mcp --plugins DIR [flags]

Serve the tools of the Wasm plugins in DIR to any MCP client (Claude
Desktop, Codex, IDEs, agent frameworks): over stdio by default (the client
starts this command), or over streamable HTTP at http://ADDR` + mcpPath + ` with
--http ADDR. The plugins run in the sandbox the flags describe and are
reloaded as DIR changes; clients are told when the tools change.

Before a call runs, a policy decides: the plugin policy --policy names, or
by default the tool's effect (read and write run, external needs approval).
Approval is asked through MCP elicitation when the client supports it;
otherwise the call is refused unless --approve names the tool.

With --mcp NAME=URL or --mcp-stdio NAME=COMMAND it serves the tools of
other MCP servers too, as NAME__TOOL, under the same policy (their tools
external, unless --mcp-trust-annotations NAME takes their effects from
their annotations); a tool whose definition changes upstream is held back
from the clients (the rug-pull guard).

Over HTTP every request must carry an API key (Authorization: Bearer KEY),
read from $` + mcpKeyEnv + ` or the variable --api-key-env names; without a
key the server listens only on a loopback address.

Flags:
`

// mcpCmd implements "agentic-host mcp".
func mcpCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("mcp", env)
	setLogLevelDefault(fs, "info")
	var (
		dir         = fs.String("plugins", "", "the plugin `DIR` (NAME.wasm, with NAME.json for plain Extism modules)")
		addr        = fs.String("http", "", "serve streamable HTTP on `ADDR` (host:port; port 0 picks one) instead of stdio")
		keyEnv      = fs.String("api-key-env", "", "read the HTTP API key from the environment variable `NAME` (default "+mcpKeyEnv+")")
		policy      = fs.String("policy", "", "decide calls with the policy `PLUGIN[:NAME]` of the loaded plugins (default: by effect)")
		tenant      = fs.String("tenant", pluginTenant, "the `TENANT` the plugins run for (their key-value scope)")
		timeout     = fs.Duration("timeout", plugins.DefaultCallTimeout, "bound on one call, and on instantiating a module")
		compile     = fs.Duration("compile-timeout", 0, fmt.Sprintf("bound on compiling a module (default %s)", plugins.DefaultCompileTimeout))
		memoryPages = fs.Uint("memory-pages", plugins.DefaultMemoryPages, "memory limit of each instance in 64 KiB `PAGES`")
		maxOutput   = fs.Int("max-output", plugins.DefaultMaxOutputBytes, "bound on a call's output, in `BYTES`")
		private     = fs.Bool("allow-private", false, "let the plugins reach loopback and private addresses too")
		kv          = fs.Bool("kv", false, "give the plugins their key-value store (in memory, unless --storage)")
		storeURL    = fs.String("storage", "", "keep the --kv store in the storage at `URL` (memory:, file:DIR, redis://…), where chat --plugin-kv keeps it")
		cacheDir    = fs.String("cache-dir", pluginDefaultCacheDir(env), "compilation cache `DIR` (\"\" for none)")
		bodyTimeout = fs.Duration("body-timeout", mcp.DefaultBodyTimeout, "with --http, a request body that takes longer to arrive is answered 408")
		idleTimeout = fs.Duration("idle-timeout", mcpIdleTimeout, "with --http, close a kept-alive connection idle this long")
		approve     pluginList
		allowHosts  pluginList
		grantSpecs  pluginList
		config      pluginList
	)
	fs.Var(&approve, "approve", "run `TOOL`'s calls without asking when the policy requires approval (repeatable; a denial stands)")
	fs.Var(&allowHosts, "allow-host", "let the plugins reach `HOST` over HTTP (host: its default port, host:port, or *.domain; repeatable; default: no HTTP)")
	fs.Var(&config, "config", "configuration key K of plugin P: `P:K=V` (repeatable)")
	var mcpServers mcpFlags
	mcpServers.register(fs, "serve")
	fs.Var(&grantSpecs, "grant", "grant plugin P a share of the sandbox the other flags describe: `P=HOST,kv,private` (any of them; repeatable); once one is given, a plugin not granted gets no HTTP and no key-value store")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), mcpUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return fail(2, "unexpected arguments %q", pos)
	}
	if *dir == "" {
		fs.Usage()
		return fail(2, "want --plugins DIR")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fail(2, "--plugins %s: not a directory", *dir)
	}
	logger, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	if *memoryPages > 65536 {
		return fail(2, "--memory-pages %d is above 65536", *memoryPages)
	}
	limits := plugins.Limits{
		CallTimeout:         *timeout,
		CompileTimeout:      *compile,
		MemoryPages:         uint32(*memoryPages),
		MaxOutputBytes:      *maxOutput,
		KV:                  *kv,
		AllowedHosts:        allowHosts,
		AllowPrivateNetwork: *private,
	}
	if err := limits.Validate(); err != nil {
		return fail(2, "%v", err)
	}
	grants, err := parseGrants("--grant", grantSpecs, limits)
	if err != nil {
		return fail(2, "%v", err)
	}
	configs := map[string]map[string]string{}
	for _, c := range config {
		name, kv, ok := strings.Cut(c, ":")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || k == "" {
			return fail(2, "--config %q: want PLUGIN:KEY=VALUE", c)
		}
		if configs[name] == nil {
			configs[name] = map[string]string{}
		}
		configs[name][k] = v
	}
	var polModule, polName string
	if *policy != "" {
		polModule, polName, _ = strings.Cut(*policy, ":")
		if polModule == "" {
			return fail(2, "--policy %q: want PLUGIN or PLUGIN:NAME", *policy)
		}
	}
	var apiKey string
	if *addr != "" {
		name := *keyEnv
		if name == "" {
			name = mcpKeyEnv
		}
		apiKey = env.Getenv(name)
		if apiKey == "" && *keyEnv != "" {
			return fail(2, "--api-key-env %s: the variable is empty or not set", name)
		}
		if apiKey == "" && !loopback(*addr) {
			return fail(2, "--http %s is not a loopback address: set an API key in $%s (or the variable --api-key-env names), or listen on 127.0.0.1", *addr, mcpKeyEnv)
		}
	} else if *keyEnv != "" {
		return fail(2, "--api-key-env is for --http: a stdio server is reached only by the client that starts it")
	}

	opts := plugins.Options{Logger: logger, CacheDir: *cacheDir}
	if *cacheDir != "" {
		if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
			opts.CacheDir = "" // a cache is an optimisation: run without one
		}
	}
	if *storeURL != "" {
		if !*kv {
			return fail(2, "--storage keeps the key-value store: it needs --kv")
		}
		store, closeStore, err := openStorage(*storeURL)
		if err != nil {
			return fail(2, "%v", err)
		}
		defer closeStore()
		skv, ok := store.(storage.KV)
		if !ok {
			return fail(2, "storage %s cannot keep values", *storeURL)
		}
		opts.KV = skv
	}
	rt, err := plugins.NewRuntime(opts)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer rt.Close(context.Background())

	// The server exists before the plugins load, so that it sees every
	// change of the registry.
	var srv *mcp.Server
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return limits },
		Grants: grants,
		Config: func(_, module string) map[string]string { return configs[module] },
		OnChange: func(c plugins.Change) {
			if srv != nil {
				srv.Changed(c)
			}
		},
		// A new version that widens what its module offers (a tool that
		// changes under the same name: the "rug-pull") is not served to
		// the clients: it waits, and the server serves the old one, until
		// a restart loads the directory afresh.
		HoldWidening: true,
	})
	defer reg.Close(context.Background())
	// Other MCP servers' tools, served beside the plugins' (a gateway):
	// their definitions trusted at the start, a change held (mcpclient).
	sources, err := mcpServers.open(env, logger, func(mcpclient.Change) {
		if srv != nil {
			srv.Sync()
		}
	})
	if err != nil {
		return err
	}
	defer func() {
		for _, src := range sources {
			src.Close()
		}
	}()
	srvOpts := mcp.Options{Registry: reg, Tenant: *tenant, Approve: approve, Logger: logger}
	for _, src := range sources {
		srvOpts.Toolsets = append(srvOpts.Toolsets, src)
	}
	var pol plugins.PolicyRef
	if polModule != "" {
		pol = plugins.PolicyRef{Registry: reg, Tenant: *tenant, Module: polModule, Policy: polName}
		srvOpts.Policy = pol
	}
	srv, err = mcp.New(srvOpts)
	if err != nil {
		return fail(2, "%v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := reg.Watch(ctx, *tenant, *dir, plugins.WatchOptions{}); err != nil {
		return fail(1, "--plugins %s: %v", *dir, err)
	}
	if polModule != "" {
		if _, err := pol.Resolve(); err != nil {
			return fail(2, "--policy %s: %v", *policy, err)
		}
	}
	served := srv.Tools()
	for _, name := range approve {
		if !slices.Contains(served, name) {
			logger.Warn("mcp: --approve names a tool the plugins do not offer (yet)", "tool", name)
		}
	}
	how := "over stdio"
	if *addr != "" {
		how = "over HTTP"
	}
	fmt.Fprintf(env.Stderr, "agentic-host mcp: serving %d tools of %s (tenant %s) %s\n", len(served), *dir, *tenant, how)

	if *addr == "" {
		if err := srv.ServeStdio(ctx, env.Stdin, env.Stdout); err != nil {
			return fail(1, "%v", err)
		}
		return nil
	}
	return serveMCPHTTP(ctx, *addr, srv, mcp.HTTPOptions{APIKey: apiKey, BodyTimeout: *bodyTimeout}, *idleTimeout, env)
}

// serveMCPHTTP serves srv at mcpPath on addr until ctx is done, then ends
// its sessions (calls in flight finish first).
func serveMCPHTTP(ctx context.Context, addr string, srv *mcp.Server, opts mcp.HTTPOptions, idle time.Duration, env Env) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(1, "--http %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(mcpPath, srv.Handler(opts))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: MCP is served at "+mcpPath, http.StatusNotFound)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle}
	fmt.Fprintf(env.Stderr, "agentic-host mcp: listening on http://%s%s\n", ln.Addr(), mcpPath)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fail(1, "--http %s: %v", addr, err)
	case <-ctx.Done():
	}
	// Stop accepting, and end the sessions: Shutdown waits for their
	// event streams, which stay open until their sessions end.
	shutdown, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- hs.Shutdown(shutdown) }()
	srv.Close()
	if err := <-stopped; err != nil {
		hs.Close()
		return fail(1, "stopping the HTTP server: %v", err)
	}
	return nil
}

// loopback reports whether addr (host:port) listens only on a loopback
// address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
