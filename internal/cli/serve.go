package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
)

const serveUsage = `Usage: agentic-host serve --config FILE [flags]

Serve the HTTP + SSE API (and the AI SDK's UI message stream) for the
tenants of the YAML configuration FILE: each API key opens one tenant's
sessions, plugins, approvals and budget. Runs belong to the server: a
client that leaves never stops one. Interrupted runs resume at start.
SIGTERM (or SIGINT) drains: readyz and new messages answer 503, event
streams close, and each run in flight stops at its next step boundary
(or completes, when its pass in flight is its last), left interrupted for
the next host to resume from there; runs still in a step after
shutdown_grace are stopped as a crash would stop them (their pass in
flight restarts on resume). The process then exits 0. A second signal
ends it at once.

Every field of the configuration can be set from the environment
(AGENTIC_CONFIG_TENANTS__ACME__BUDGET_USD_PER_DAY=5; AGENTIC_LISTEN,
AGENTIC_STORAGE) or with --set PATH=VALUE (tenants.acme.budget_usd_per_day=5),
a flag winning over the environment, the environment over the file.

Flags:
`

// serveCmd implements "agentic-host serve".
func serveCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("serve", env)
	setLogLevelDefault(fs, "info")
	configPath := fs.String("config", "", "the YAML configuration `FILE`")
	listen := fs.String("listen", "", "listen on `ADDR` (host:port; port 0 picks one), instead of the configuration's")
	storeURL := fs.String("storage", "", "the storage `URL`, instead of the configuration's")
	offline := fs.Bool("offline", false, "answer with the built-in fake model (no network), instead of the configuration's endpoint")
	var sets pluginList
	fs.Var(&sets, "set", "set a configuration field: `PATH=VALUE` (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *configPath == "" {
		fs.Usage()
		return fail(2, "want --config FILE")
	}
	log, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	cfg, err := server.LoadConfig(*configPath)
	if err != nil {
		return fail(2, "%v", err)
	}
	flags := append([]string(nil), sets...)
	if *listen != "" {
		flags = append(flags, "listen="+*listen)
	}
	if *storeURL != "" {
		flags = append(flags, "storage="+*storeURL)
	}
	if *offline {
		flags = append(flags, "model.offline=true")
	}
	if cfg, err = server.ApplyOverrides(cfg, os.Environ(), flags); err != nil {
		return fail(2, "%v", err)
	}
	if cfg.Storage == "" {
		cfg.Storage = server.DefaultStorage
	}
	if cfg.Listen == "" {
		cfg.Listen = server.DefaultListen
	}
	if cfg.PluginCacheDir == "" {
		cfg.PluginCacheDir = servePluginCacheDir(env, log)
	}
	store, closeStore, err := openStorage(cfg.Storage)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	model, closeModel, err := serveModel(cfg.Model, env)
	if err != nil {
		return err
	}
	defer closeModel()
	secret, err := approvalSecret(env, store)
	if err != nil {
		return fail(1, "%v", err)
	}
	tel, stopTel, err := otelFromEnv(ctx, env)
	if err != nil {
		return fail(2, "OpenTelemetry: %v", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		stopTel(ctx)
	}()
	srv, err := server.New(server.Options{Config: cfg, Storage: store, Model: model, ApprovalSecret: secret, Logger: log, Telemetry: tel,
		Version: strings.TrimPrefix(version(), "agentic-host ")})
	if err != nil {
		return fail(2, "%v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		srv.Close(context.Background())
		return fail(2, "listen on %s: %v", cfg.Listen, err)
	}
	idle := time.Duration(cfg.IdleTimeout)
	if idle == 0 {
		idle = server.DefaultIdleTimeout
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle, ErrorLog: nil}
	fmt.Fprintf(env.Stdout, "agentic-host serve: listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		srv.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Graceful: stop taking work (the listener stays open, so that a load
	// balancer reads 503 from readyz and new messages rather than refused
	// connections), let the runs reach a step boundary within the grace,
	// leave them resumable for the next host; then stop the listener. A
	// second signal ends the process at once (a crash, as recoverable).
	stop()
	grace := cfg.ShutdownGrace
	if grace == 0 {
		grace = server.Duration(server.DefaultShutdownGrace)
	}
	log.Info("shutting down: draining", "grace", time.Duration(grace))
	srv.Drain()
	gctx, cancel := context.WithTimeout(context.Background(), time.Duration(grace))
	defer cancel()
	switch err := srv.Close(gctx); {
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("shutdown: the grace passed; the runs still in a step were stopped, to resume on the next host", "grace", time.Duration(grace))
	case err != nil:
		log.Warn("shutdown", "err", err)
	}
	// The runs have stopped, and with them the event streams and the
	// waiting requests: what is left are short reads.
	sctx, cancel2 := context.WithTimeout(context.Background(), listenerDrain)
	defer cancel2()
	hs.Shutdown(sctx)
	hs.Close()
	log.Info("shut down")
	return nil
}

// servePluginCacheDir is serve's plugin_cache_dir when the configuration
// names none: the plugin commands' ($AGENTIC_WASM_CACHE, else the user
// cache directory's agentic-host/wasm), so that a restart loads the
// plugins it compiled before with no compiler process; "" (a cache of the
// process's own) when that directory cannot be made or written, said in
// a warning.
func servePluginCacheDir(env Env, log *slog.Logger) string {
	dir := pluginDefaultCacheDir(env)
	if dir == "" {
		log.Warn("no plugin compilation cache on disk: set plugin_cache_dir (no HOME, XDG_CACHE_HOME or AGENTIC_WASM_CACHE); every start compiles every plugin again")
		return ""
	}
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
	if err != nil {
		log.Warn("no plugin compilation cache on disk: set plugin_cache_dir; every start compiles every plugin again", "dir", dir, "err", err)
		return ""
	}
	return dir
}

// listenerDrain bounds the wait for the requests in flight once the runs
// have stopped.
const listenerDrain = 5 * time.Second

// serveModel builds the model client of the configuration, or the fake
// model when offline.
func serveModel(mc server.ModelConfig, env Env) (host.Model, func(), error) {
	cfg := provider.Config{BaseURL: mc.BaseURL, APIKey: env.Getenv(mc.APIKeyEnv)}
	if mc.APIKeyEnv == "" {
		cfg.APIKey = env.Getenv("OPENROUTER_API_KEY")
	}
	closeModel := func() {}
	if mc.Offline {
		srv, err := fakemodel.Start(fakemodel.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("start the fake model: %w", err)
		}
		cfg.BaseURL, cfg.APIKey = srv.URL(), "offline"
		closeModel = func() { srv.Close() }
	} else if cfg.BaseURL == "" {
		cfg.BaseURL = provider.DefaultBaseURL
	}
	if !mc.Offline {
		if err := checkEndpoint(cfg.BaseURL, cfg.APIKey); err != nil {
			return nil, nil, err
		}
	}
	client, err := provider.New(cfg)
	if err != nil {
		closeModel()
		return nil, nil, fail(2, "%v", err)
	}
	return client, closeModel, nil
}

const keysUsage = `Usage:
  agentic-host keys create --tenant T [--expires D] [--user U] [--storage URL]
                                                        make a key for tenant T (printed once), valid
                                                        for D (30d, 12h) or until a time (2026-12-31),
                                                        bound to end user U (its requests are U's)
  agentic-host keys list [--storage URL] [--json]       list the stored keys (never the keys themselves)
  agentic-host keys revoke ID [--storage URL]           revoke a key: requests with it fail, streams close
  agentic-host keys hash KEY                            print a key's hash, for a configuration's keys

Keys are kept hashed in the storage that serve uses, so every host sharing
it knows them.

Flags:
`

// keysCmd implements "agentic-host keys".
func keysCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("keys", env)
	storeURL := fs.String("storage", DefaultStorage, storageHelp)
	tenant := fs.String("tenant", "", "the `TENANT` a new key opens")
	asJSON := fs.Bool("json", false, "print JSON")
	expires := fs.String("expires", "", "the new key expires after `D` (30d, 36h, 90m) or at a time (2026-12-31, 2026-12-31T18:00:00Z); default: never")
	user := fs.String("user", "", "bind the new key to the end `USER`: its requests are that user's (rate_limit.per_user); default: a key of the whole tenant")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), keysUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fail(2, "want create, list, revoke or hash")
	}
	if pos[0] == "hash" {
		if len(pos) != 2 {
			return fail(2, "want keys hash KEY")
		}
		fmt.Fprintln(env.Stdout, server.HashKey(pos[1]))
		return nil
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storeURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	kv, ok := store.(storage.KV)
	if !ok {
		return fail(2, "storage %s cannot keep values", *storeURL)
	}
	switch pos[0] {
	case "create":
		if len(pos) != 1 || *tenant == "" {
			return fail(2, "want keys create --tenant T")
		}
		opts := server.KeyOptions{User: *user}
		if *expires != "" {
			at, err := expiryOf(*expires, time.Now())
			if err != nil {
				return fail(2, "--expires %q: %v", *expires, err)
			}
			opts.ExpiresAt = at
		}
		key, rec, err := server.CreateKey(ctx, kv, *tenant, opts)
		if err != nil {
			return fail(1, "%v", err)
		}
		if *asJSON {
			return printJSON(env, map[string]any{"key": key, "record": rec})
		}
		fmt.Fprintln(env.Stdout, key)
		until := ""
		if rec.User != "" {
			until = ", bound to user " + rec.User
		}
		if !rec.ExpiresAt.IsZero() {
			until += ", valid until " + rec.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(env.Stderr, "key %s for tenant %s%s: keep it now, it is not shown again\n", rec.ID, rec.Tenant, until)
	case "list":
		recs, err := server.ListKeys(ctx, kv)
		if err != nil {
			return fail(1, "%v", err)
		}
		if *asJSON {
			if recs == nil {
				recs = []server.KeyRecord{}
			}
			return printJSON(env, recs)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tUSER\tCREATED\tEXPIRES\tREVOKED")
		now := time.Now()
		for _, r := range recs {
			revoked, expires, user := "-", "-", cmp.Or(r.User, "-")
			if !r.RevokedAt.IsZero() {
				revoked = r.RevokedAt.Format(time.RFC3339)
			}
			if !r.ExpiresAt.IsZero() {
				expires = r.ExpiresAt.Format(time.RFC3339)
				if r.Expired(now) {
					expires += " (expired)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Tenant, user, r.CreatedAt.Format(time.RFC3339), expires, revoked)
		}
		tw.Flush()
	case "revoke":
		if len(pos) != 2 {
			return fail(2, "want keys revoke ID")
		}
		rec, err := server.RevokeKey(ctx, kv, pos[1])
		if errors.Is(err, server.ErrNoSuchKey) {
			return fail(1, "%v", err)
		}
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintf(env.Stdout, "key %s of tenant %s revoked\n", rec.ID, rec.Tenant)
	default:
		fs.Usage()
		return fail(2, "unknown keys command %q", pos[0])
	}
	return nil
}

// expiryOf reads --expires: a duration from now (Go's, with d for days:
// 30d, 1d12h) or a time (RFC 3339, or a date: its midnight UTC).
func expiryOf(v string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if at, err := time.Parse(layout, v); err == nil {
			return at.UTC(), nil
		}
	}
	rest, days := v, 0
	if i := strings.Index(rest, "d"); i > 0 {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 {
			return time.Time{}, errors.New("want a duration (30d, 36h, 90m) or a time (2026-12-31)")
		}
		days, rest = n, rest[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return time.Time{}, errors.New("want a duration (30d, 36h, 90m) or a time (2026-12-31)")
		}
	}
	d += time.Duration(days) * 24 * time.Hour
	if d <= 0 {
		return time.Time{}, errors.New("want a duration above zero")
	}
	return now.Add(d).UTC(), nil
}

func printJSON(env Env, v any) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
