package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
)

const tenantUsage = `Usage:
  agentic-host tenant delete T --config FILE [--storage URL] [--json]
      delete every trace of tenant T from the storage serve uses, and its
      plugins: sessions, key-value values, blobs, stored API keys, plugin
      files. It prints what it removed.

Remove T from the configuration first (and reload or restart every host
that serves it): the command refuses a tenant the configuration still
names, since a host serving it would write again what is being deleted.
Running it again after a failure finishes the work.

Flags:
`

// tenantCmd implements "agentic-host tenant".
func tenantCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("tenant", env)
	configPath := fs.String("config", "", "serve's configuration `FILE` (its storage and plugins_dir)")
	storeURL := fs.String("storage", "", "the storage `URL`, instead of the configuration's")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tenantUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "delete" {
		fs.Usage()
		return fail(2, "want tenant delete T --config FILE")
	}
	name := pos[1]
	if *configPath == "" {
		return fail(2, "want --config FILE: the configuration of serve, for its storage and plugins_dir")
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	cfg, err := server.LoadConfig(*configPath)
	if err != nil {
		return fail(2, "%v", err)
	}
	var flags []string
	if *storeURL != "" {
		flags = append(flags, "storage="+*storeURL)
	}
	if cfg, err = server.ApplyOverrides(cfg, os.Environ(), flags); err != nil {
		return fail(2, "%v", err)
	}
	if _, ok := cfg.Tenants[name]; ok {
		return fail(1, "tenant %s is still in %s: remove it there (and reload every host that serves it) first", name, *configPath)
	}
	if cfg.Storage == "" {
		cfg.Storage = server.DefaultStorage
	}
	store, closeStore, err := openStorage(cfg.Storage)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	rep, err := server.DeleteTenant(ctx, store, cfg.PluginsDir, name)
	if *asJSON {
		if perr := printJSON(env, rep); perr != nil {
			return perr
		}
	} else {
		fmt.Fprintf(env.Stdout, "tenant %s: deleted %d sessions (%d events), %d key-value namespaces (%d keys), %d API keys, %d blobs (%d bytes), %d plugins (%d bytes)\n",
			name, rep.Sessions, rep.Events, rep.Namespaces, rep.Keys, rep.APIKeys, rep.Blobs, rep.BlobBytes, rep.Plugins, rep.PluginBytes)
	}
	if err != nil {
		return fail(1, "not everything was deleted (run the command again to finish): %v", err)
	}
	return nil
}

const deleteUsage = `Usage: agentic-host delete [--storage URL] [--tenant T] [--force] SESSION

Delete a session from a store (or from tenant T of serve's): its ledger,
lease and approval-index entries. A session in use (a run in progress, a
run parked for approvals, a lease another host holds) is refused unless
--force.

Flags:
`

// deleteCmd implements "agentic-host delete".
func deleteCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("delete", env)
	storeURL := fs.String("storage", DefaultStorage, storageHelp)
	tenant := fs.String("tenant", "", "the `TENANT` of serve whose session it is")
	force := fs.Bool("force", false, "delete the session even while it is in use")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), deleteUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fail(2, "want exactly one SESSION")
	}
	if !storage.ValidSessionID(pos[0]) {
		return fail(2, "invalid session id %q", pos[0])
	}
	logger, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storeURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	view, err := tenantView(store, *tenant)
	if err != nil {
		return err
	}
	h, err := host.New(host.Options{Storage: view, Model: noModel{}, Agent: host.Agent{Model: "none"}, Tenant: *tenant, Logger: logger})
	if err != nil {
		return fail(1, "%v", err)
	}
	defer h.Close(context.Background())
	rep, err := h.Session(pos[0]).Delete(ctx, host.DeleteOptions{Force: *force})
	if err != nil {
		return fail(1, "%v", err)
	}
	if rep.Events == 0 {
		return fail(1, "no session %s in %s", pos[0], *storeURL)
	}
	// The session's retention override goes with it, as through the
	// API: a later session of that id does not inherit it.
	if kv, ok := view.(storage.KV); ok {
		if err := retention.SetOverride(ctx, kv, pos[0], retention.Override{}); err != nil {
			return fail(1, "session %s is deleted, but not its retention override: %v", pos[0], err)
		}
	}
	if *asJSON {
		return printJSON(env, rep)
	}
	fmt.Fprintf(env.Stdout, "session %s deleted: %d events (%d bytes), %d index entries\n", rep.SessionID, rep.Events, rep.Bytes, rep.IndexEntries)
	return nil
}
