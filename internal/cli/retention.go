package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
)

const retentionUsage = `Usage: agentic-host retention sweep --config FILE [--tenant T] [--json]

Apply the tenants' retention policies (retention: in serve's configuration)
once, now, on the configured storage: archive or delete their closed
sessions past keep_days or keep_last, skipping sessions in use. Safe while
serve runs on other hosts; a second sweep finds nothing to do.

Flags:
`

// retentionCmd implements "agentic-host retention sweep".
func retentionCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("retention", env)
	configPath := fs.String("config", "", "serve's configuration `FILE` (its storage and tenants' retention)")
	storeURL := fs.String("storage", "", "the storage `URL`, instead of the configuration's")
	only := fs.String("tenant", "", "sweep this `TENANT` only")
	asJSON := fs.Bool("json", false, "print the reports as JSON, by tenant")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), retentionUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "sweep" {
		fs.Usage()
		return fail(2, "want retention sweep --config FILE")
	}
	if *configPath == "" {
		return fail(2, "want --config FILE")
	}
	logger, err := newLogger(fs, env)
	if err != nil {
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
	if cfg.Storage == "" {
		cfg.Storage = server.DefaultStorage
	}
	var names []string
	for name, tc := range cfg.Tenants {
		if tc.Retention != nil && (*only == "" || name == *only) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		if *only != "" {
			return fail(1, "tenant %s has no retention policy in %s", *only, *configPath)
		}
		return fail(1, "no tenant of %s has a retention policy", *configPath)
	}
	store, closeStore, err := openStorage(cfg.Storage)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	reports := map[string]retention.Report{}
	var failed []string
	slices.Sort(names)
	for _, name := range names {
		view, err := storage.Prefix(store, name+":")
		if err != nil {
			return fail(2, "%v", err)
		}
		h, err := host.New(host.Options{Storage: view, Model: noModel{}, Agent: host.Agent{Model: "none"}, Tenant: name,
			Logger: logger.With("tenant", name)})
		if err != nil {
			return fail(1, "%v", err)
		}
		rep, err := retention.Sweep(ctx, retention.Options{Host: h, Storage: view, Policy: cfg.Tenants[name].Retention.Policy(name),
			Tenant: name, Logger: logger.With("tenant", name)})
		h.Close(context.Background())
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
		}
		if len(rep.Errors) > 0 {
			failed = append(failed, fmt.Sprintf("%s: %s", name, strings.Join(rep.Errors, "; ")))
		}
		reports[name] = rep
		if !*asJSON {
			fmt.Fprintf(env.Stdout, "tenant %s: archived %d, deleted %d, kept %d, skipped %d\n", name, len(rep.Archived), len(rep.Deleted), rep.Kept, len(rep.Skipped))
			for _, s := range rep.Skipped {
				fmt.Fprintf(env.Stdout, "  skipped %s: %s\n", s.Session, s.Reason)
			}
		}
	}
	if *asJSON {
		if err := printJSON(env, reports); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fail(1, "%s", strings.Join(failed, "\n"))
	}
	return nil
}
