package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

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
