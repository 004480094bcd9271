package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

// pluginTenant is the tenant of the plugins a command loads from --plugins.
const pluginTenant = "default"

// pluginSandbox is what the plugins of --plugins may do.
type pluginSandbox struct {
	limits plugins.Limits
	grants func(tenant, module string) plugins.Grant // nil: every plugin gets limits whole
	config map[string]map[string]string              // by plugin name
	kv     storage.KV                                // nil: the runtime's own, in memory
}

// pluginSandbox builds the sandbox of the --plugin-* flags. The key-value
// store is kept in store when it can keep values (every built-in store
// can).
func (m *modelFlags) pluginSandbox(store storage.Storage) (pluginSandbox, error) {
	sb := pluginSandbox{
		limits: plugins.Limits{KV: m.pluginKV, AllowedHosts: m.pluginHosts, AllowPrivateNetwork: m.pluginPrivate, CompileTimeout: m.pluginCompile},
		config: map[string]map[string]string{},
	}
	if err := sb.limits.Validate(); err != nil {
		return sb, fmt.Errorf("the --plugin-* flags: %v", err)
	}
	var err error
	if sb.grants, err = parseGrants("--plugin-grant", m.pluginGrants, sb.limits); err != nil {
		return sb, err
	}
	for _, c := range m.pluginConfig {
		name, kv, ok := strings.Cut(c, ":")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || name == "" || k == "" {
			return sb, fmt.Errorf("--plugin-config %q: want PLUGIN:KEY=VALUE", c)
		}
		if sb.config[name] == nil {
			sb.config[name] = map[string]string{}
		}
		sb.config[name][k] = v
	}
	if kv, ok := store.(storage.KV); ok && m.pluginKV {
		sb.kv = kv
	}
	return sb, nil
}

// watchPlugins loads the plugins of dir and keeps them reloaded as its files
// change, in the returned registry (their tools: its Toolset(pluginTenant)). Compiled modules are cached
// on disk (the user's cache directory), so a second start is fast.
func watchPlugins(dir string, log *slog.Logger, sb pluginSandbox) (*plugins.Registry, func(), error) {
	var cache string
	if d, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(d, "agentic-host", "wazero")
	}
	rt, err := plugins.NewRuntime(plugins.Options{CacheDir: cache, Logger: log, KV: sb.kv})
	if err != nil {
		return nil, nil, err
	}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return sb.limits },
		Grants: sb.grants,
		Config: func(_, module string) map[string]string { return sb.config[module] },
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := reg.Watch(ctx, pluginTenant, dir, plugins.WatchOptions{})
	if err != nil {
		cancel()
		reg.Close(context.Background())
		rt.Close(context.Background())
		return nil, nil, err
	}
	return reg, func() {
		w.Close()
		cancel()
		reg.Close(context.Background())
		rt.Close(context.Background())
	}, nil
}

// loadValidator loads the validator spec names: FILE.wasm, or
// FILE.wasm:NAME for one of several validators of the plugin.
func loadValidator(spec string, log *slog.Logger) (host.Validator, func(), error) {
	path, name := spec, ""
	if i := strings.LastIndex(spec, ".wasm:"); i >= 0 {
		path, name = spec[:i+len(".wasm")], spec[i+len(".wasm:"):]
	}
	rt, err := plugins.NewRuntime(plugins.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	closeAll := func() {
		reg.Close(context.Background())
		rt.Close(context.Background())
	}
	m, err := reg.LoadFile(context.Background(), pluginTenant, path)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	vs := m.Description().Validators
	if name == "" {
		if len(vs) != 1 {
			closeAll()
			return nil, nil, fmt.Errorf("%s has %d validators: name one as %s:NAME", path, len(vs), path)
		}
		name = vs[0].Name
	}
	v, ok := reg.Validator(pluginTenant, name)
	if !ok {
		closeAll()
		return nil, nil, fmt.Errorf("%s has no validator %q", path, name)
	}
	return v, closeAll, nil
}

// parseGrants reads --plugin-grant (mcp: --grant) flags, each
// "PLUGIN=ITEM,ITEM…", an item a host (as --allow-host takes it), "kv"
// or "private": once one is given, each plugin gets only its own grant
// of the sandbox the other flags describe (one not named gets no HTTP and
// no key-value store), each within it; nil when none is given.
func parseGrants(flag string, specs []string, limits plugins.Limits) (func(tenant, module string) plugins.Grant, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	grants := map[string]plugins.Grant{}
	for _, spec := range specs {
		name, items, ok := strings.Cut(spec, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s %q: want PLUGIN=HOST,kv,private (any of them)", flag, spec)
		}
		g := grants[name]
		for _, it := range strings.Split(items, ",") {
			switch it = strings.TrimSpace(it); it {
			case "":
			case "kv":
				g.KV = true
			case "private":
				g.AllowPrivateNetwork = true
			default:
				g.AllowedHosts = append(g.AllowedHosts, it)
			}
		}
		if _, err := limits.Within(g); err != nil {
			return nil, fmt.Errorf("%s %q: %v", flag, spec, err)
		}
		grants[name] = g
	}
	return func(_, module string) plugins.Grant { return grants[module] }, nil
}
