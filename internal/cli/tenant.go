package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/agentichost/agentic/server"
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
