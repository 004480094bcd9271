package server

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentichost/agentic/plugins/oci"
)

// Plugins from OCI registries: a tenant's configuration lists modules
// pinned by digest (TenantConfig.Plugins, oci://…@sha256:…). At start,
// each is pulled (plugins/oci: verified against its digests, bounded by the
// tenant's module size, cached by digest in OCI.CacheDir so that a restart
// needs no registry; through plugins.PullClient — the registry at any
// address, its redirects only to public ones, no proxy from the
// environment — within ociPullTimeout) and loaded as the tenant's other plugins (its
// sandbox, grants and trusted keys apply). One that cannot be pulled or
// does not load is refused: listed under GET /v1/plugins' refusals and
// audited "refused" by "configuration"; the tenant's other plugins serve.
// Their names belong to the configuration: an upload or a removal of one
// is refused (409), and a name plugins_dir holds too refuses the
// reference.

// ociPullTimeout bounds one pull at start.
const ociPullTimeout = 2 * time.Minute

// configPlugins are the tenants' plugins of the configuration.
type configPlugins struct {
	mu      sync.Mutex
	refs    map[string]map[string]string // tenant → module name → reference
	refused map[string][]refusal         // tenant → references refused before loading
}

// ociCacheDir is where pulled modules are cached; "" for nowhere.
func (s *Server) ociCacheDir() string {
	switch {
	case s.cfg.OCI.CacheDir != "":
		return s.cfg.OCI.CacheDir
	case s.cfg.PluginsDir != "":
		return filepath.Join(s.cfg.PluginsDir, ".oci")
	case s.cfg.PluginCacheDir != "":
		return filepath.Join(s.cfg.PluginCacheDir, "oci")
	}
	return ""
}

// pullPlugins pulls and loads the tenant's plugins of the configuration.
func (s *Server) pullPlugins(ctx context.Context, tenant string) {
	refs := s.cfg.Tenants[tenant].Plugins
	if len(refs) == 0 {
		return
	}
	limits := s.cfg.Tenants[tenant].Sandbox.limits() // 0 module bytes: the default
	cache := s.ociCacheDir()
	if cache != "" {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			s.log.Warn("cannot make the OCI cache directory: pulling without a cache", "dir", cache, "err", err)
			cache = ""
		}
	}
	for _, raw := range refs {
		ref, err := oci.ParseReference(raw) // checked by normalized
		if err != nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, ociPullTimeout)
		m, err := oci.Pull(pctx, ref, oci.Options{CacheDir: cache, MaxModuleBytes: limits.MaxModuleBytes, Insecure: s.cfg.OCI.Insecure})
		cancel()
		name := m.Source.Name
		if err == nil {
			if other := s.plugins.ref(tenant, name); other != "" {
				err = fmt.Errorf("plugin %s is named by %s already: name one of them otherwise (the annotation %s)", name, other, oci.AnnotationName)
			} else if _, ferr := os.Stat(filepath.Join(s.cfg.PluginsDir, tenant, name+".wasm")); s.cfg.PluginsDir != "" && ferr == nil {
				err = fmt.Errorf("plugin %s is in plugins_dir too: remove one of them", name)
			}
		}
		if err != nil {
			if name == "" {
				name = path.Base(ref.Repository)
			}
			s.log.Warn("a plugin of the configuration was refused", "tenant", tenant, "ref", raw, "err", err)
			s.plugins.refuse(tenant, refusal{Name: name, Reason: raw + ": " + err.Error()})
			if err := s.audit.record(ctx, tenant, auditEntry{Action: "refused", Plugin: name, By: "configuration", Detail: raw + ": " + err.Error()}); err != nil {
				s.log.Error("cannot write the audit log", "tenant", tenant, "plugin", name, "err", err)
			}
			continue
		}
		s.plugins.set(tenant, name, raw)
		if m.Cached {
			s.log.Info("plugin pulled from the cache", "tenant", tenant, "plugin", name, "ref", raw)
		} else {
			s.log.Info("plugin pulled", "tenant", tenant, "plugin", name, "ref", raw)
		}
		s.audit.act(tenant, name, "configuration", func() { _, err = s.registry.Load(ctx, tenant, m.Source) })
		// A module that does not load is refused, listed and audited by
		// the registry's change.
	}
}

func (c *configPlugins) ref(tenant, name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refs[tenant][name]
}

func (c *configPlugins) set(tenant, name, ref string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == nil {
		c.refs = map[string]map[string]string{}
	}
	if c.refs[tenant] == nil {
		c.refs[tenant] = map[string]string{}
	}
	c.refs[tenant][name] = ref
}

func (c *configPlugins) refuse(tenant string, r refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string][]refusal{}
	}
	c.refused[tenant] = append(c.refused[tenant], r)
}

func (c *configPlugins) refusals(tenant string) []refusal {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]refusal(nil), c.refused[tenant]...)
}

// fromConfig is the configuration's reference of the tenant's plugin name
// (oci://…), "" when the plugin does not come from the configuration.
func (s *Server) fromConfig(tenant, name string) string { return s.plugins.ref(tenant, name) }
