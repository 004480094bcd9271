package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

// TenantDeletion tells what [DeleteTenant] removed.
type TenantDeletion struct {
	Tenant string `json:"tenant"`
	// Sessions and Events: the tenant's ledgers.
	Sessions int `json:"sessions"`
	Events   int `json:"events"`
	// Namespaces and Keys: the key-value namespaces of the tenant (its
	// prefix's, and the server's per-tenant ones: audit, budgets, A2A
	// tasks, MCP pins, plugin values, fuel), and the keys they held.
	Namespaces int `json:"namespaces"`
	Keys       int `json:"keys"`
	// APIKeys is how many stored API keys of the tenant were removed
	// (keys in the configuration file are the operator's to remove).
	APIKeys int `json:"api_keys"`
	// Blobs and BlobBytes: the tenant's blobs, on a storage that keeps
	// blobs.
	Blobs     int   `json:"blobs"`
	BlobBytes int64 `json:"blob_bytes"`
	// Plugins is how many plugin files were removed from the tenant's
	// directory of plugins, and PluginBytes their size.
	Plugins     int   `json:"plugins"`
	PluginBytes int64 `json:"plugin_bytes"`
}

// tenantNamespaces returns the server's key-value namespaces of a tenant
// that lie outside its prefix: exact names, and prefixes of names (those
// kept by day or by kind). Every per-tenant namespace the server adds
// belongs here (TestTenantDeleteLeavesNothing scans for leftovers).
func tenantNamespaces(tenant string) (exact, prefixes []string) {
	exact = []string{auditNamespace(tenant), "agentic:budget:" + tenant, a2aNamespace(tenant),
		mcpPinsNamespace(tenant), plugins.StorageNamespace + tenant}
	prefixes = []string{"agentic:budget:" + tenant + ":", "agentic:budget-raise:" + tenant + ":",
		"agentic:plugin-fuel:" + tenant + ":"}
	return exact, prefixes
}

// DeleteTenant deletes every trace of tenant from store (the storage of
// serve, not a tenant's prefix of it) and from pluginsDir (the
// configuration's plugins_dir, "" for none): its sessions, its key-value
// namespaces, its blobs, its stored API keys, its audit sequence, the
// leases of its schedules and webhooks, and its plugin directory. The
// tenant's keys in the configuration file stay: remove the tenant from
// the configuration (and reload every host) first, so that no host
// serves it while it is deleted. DeleteTenant looks at no lease: a run of
// the tenant in progress on a host that still serves it loses its ledger.
// Nothing of another tenant is touched. It goes on after a failure and
// returns what it removed with every error joined: running it again
// finishes the work. store must implement storage.Deleter and
// storage.NamespaceLister, as every built-in store does.
func DeleteTenant(ctx context.Context, store storage.Storage, pluginsDir, tenant string) (TenantDeletion, error) {
	rep := TenantDeletion{Tenant: tenant}
	if !tenantName.MatchString(tenant) {
		return rep, fmt.Errorf("server: tenant %q: want 1 to 32 of [a-z0-9_-]", tenant)
	}
	kv, ok1 := store.(storage.KV)
	nsl, ok2 := store.(storage.NamespaceLister)
	del, ok3 := store.(storage.Deleter)
	if !ok1 || !ok2 || !ok3 {
		return rep, fmt.Errorf("server: deleting a tenant needs a storage that deletes sessions and lists namespaces (storage.Deleter, storage.NamespaceLister); %T does not", store)
	}
	var errs []error
	pd, err := storage.DeletePrefix(ctx, store, tenant+":")
	errs = append(errs, err)
	rep.Sessions, rep.Events, rep.Namespaces, rep.Keys = pd.Sessions, pd.Events, pd.Namespaces, pd.Keys
	rep.Blobs, rep.BlobBytes = pd.Blobs, pd.BlobBytes

	exact, prefixes := tenantNamespaces(tenant)
	for _, p := range prefixes {
		found, err := nsl.Namespaces(ctx, p)
		errs = append(errs, err)
		exact = append(exact, found...)
	}
	for _, ns := range exact {
		n, err := kv.Len(ctx, ns)
		if err == nil && n > 0 {
			err = nsl.DeleteNamespace(ctx, ns)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			rep.Namespaces++
			rep.Keys += n
		}
	}
	// The tenant's audit sequence, in the server's namespace of them.
	if _, ok, err := kv.Get(ctx, "agentic:audit-seq", tenant); err != nil {
		errs = append(errs, err)
	} else if ok {
		errs = append(errs, kv.Delete(ctx, "agentic:audit-seq", tenant))
		rep.Keys++
	}
	// Stored API keys.
	recs, err := ListKeys(ctx, kv)
	errs = append(errs, err)
	for _, r := range recs {
		if r.Tenant != tenant {
			continue
		}
		if err := kv.Delete(ctx, keysNamespace, r.Hash); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.APIKeys++
	}
	// The leases of its schedules and webhooks (ids no session of any
	// tenant has: they lack a prefix's ':').
	for _, id := range []string{"schedules." + tenant, "webhooks." + tenant} {
		errs = append(errs, del.DeleteSession(ctx, id))
	}
	if pluginsDir != "" {
		dir := filepath.Join(pluginsDir, tenant)
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if info, err := d.Info(); err == nil && filepath.Ext(path) == ".wasm" {
				rep.Plugins++
				rep.PluginBytes += info.Size()
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err == nil {
			err = os.RemoveAll(dir)
		}
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}
