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
)

// pluginTenant is the tenant of the plugins a command loads from --plugins.
const pluginTenant = "default"

// watchPlugins loads the plugins of dir and keeps them reloaded as its files
// change; their tools are the returned toolset. Compiled modules are cached
// on disk (the user's cache directory), so a second start is fast.
func watchPlugins(dir string, log *slog.Logger) (host.Toolset, func(), error) {
	var cache string
	if d, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(d, "agentic-host", "wazero")
	}
	rt, err := plugins.NewRuntime(plugins.Options{CacheDir: cache, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := reg.Watch(ctx, pluginTenant, dir, plugins.WatchOptions{})
	if err != nil {
		cancel()
		reg.Close(context.Background())
		rt.Close(context.Background())
		return nil, nil, err
	}
	return reg.Toolset(pluginTenant), func() {
		w.Close()
		cancel()
		reg.Close(context.Background())
		rt.Close(context.Background())
	}, nil
}

// loadValidator loads the validator spec names: FILE.wasm, or
// FILE.wasm:NAME for one of several validators of the plugin.
func loadValidator(spec string, env Env) (host.Validator, func(), error) {
	path, name := spec, ""
	if i := strings.LastIndex(spec, ".wasm:"); i >= 0 {
		path, name = spec[:i+len(".wasm")], spec[i+len(".wasm:"):]
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
	return plugins.HostValidator(v), closeAll, nil
}
