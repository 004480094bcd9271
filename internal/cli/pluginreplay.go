package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

// pluginReplayCmd implements "agentic-host plugin replay": the recorded
// plugin tool calls of a session run again, with no network and without
// touching the key-value store, their host functions answered from the
// traffic recorded beside each result, on the module of the recorded hash
// (found in a plugin directory) or on one given (a new version, tested
// against recorded traffic). It prints per call: same, diverged (where)
// or not replayable (why), and exits 1 when a call diverged.
func pluginReplayCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin replay", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	dir := fs.String("plugins", "", "find each call's module, by its recorded hash, in `DIR` (NAME.wasm, and serve's DIR/.versions)")
	module := fs.String("module", "", "replay the calls of the tools it offers on the module `FILE.wasm` instead (a new version)")
	tenant := fs.String("tenant", "default", "the `TENANT` the plugin is told it runs for")
	var config pluginList
	fs.Var(&config, "config", "plugin configuration `KEY=VALUE` (repeatable): what the host gave it (it is not recorded)")
	timeout := fs.Duration("timeout", plugins.DefaultCallTimeout, "bound on one call")
	memoryPages := fs.Uint("memory-pages", plugins.DefaultMemoryPages, "memory limit in 64 KiB `PAGES`")
	cacheDir := fs.String("cache-dir", pluginDefaultCacheDir(env), "compilation cache `DIR` (\"\" for none)")
	asJSON := fs.Bool("json", false, "print JSON: one object per call")
	setLogLevelDefault(fs, "error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin replay [flags] (--plugins DIR | --module FILE.wasm) SESSION [CALL_ID]\n\n"+
			"Run the session's recorded plugin tool calls (or the one CALL_ID) again, with no\n"+
			"network and without touching the key-value store: each HTTP request must be the\n"+
			"one recorded at its place and gets the recorded answer, each key-value read the\n"+
			"recorded value. Prints per call: same, diverged (where), or not replayable (why).\n"+
			"Exits 1 when a call diverged.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fail(2, "want SESSION [CALL_ID], got %d arguments", len(pos))
	}
	if (*dir == "") == (*module == "") {
		fs.Usage()
		return fail(2, "want one of --plugins DIR or --module FILE.wasm")
	}
	if *memoryPages > 65536 {
		return fail(2, "--memory-pages %d is above 65536", *memoryPages)
	}
	cfg := map[string]string{}
	for _, kv := range config {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fail(2, "--config %q: want KEY=VALUE", kv)
		}
		cfg[k] = v
	}
	id := pos[0]
	if !storage.ValidSessionID(id) {
		return fail(2, "invalid session id %q", id)
	}
	logger, err := newLogger(fs, env)
	if err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storageURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	events, err := store.Load(ctx, id)
	if err == nil {
		events, err = host.ResolveBlobs(ctx, store, events)
	}
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fail(1, "no session %s in %s", id, *storageURL)
	}
	var calls []ledger.RecordedCall
	for _, c := range ledger.RecordedCalls(events) {
		if strings.HasPrefix(c.Result.Source, "sha256:") && (len(pos) == 1 || c.Call.ID == pos[1]) {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		if len(pos) == 2 {
			return fail(1, "session %s has no plugin tool call %s", id, pos[1])
		}
		return fail(1, "session %s has no plugin tool calls", id)
	}

	if *cacheDir != "" && os.MkdirAll(*cacheDir, 0o755) != nil {
		*cacheDir = ""
	}
	rt, err := plugins.NewRuntime(plugins.Options{CacheDir: *cacheDir, Logger: logger})
	if err != nil {
		return fail(1, "%v", err)
	}
	defer rt.Close(context.Background())
	limits := plugins.Limits{MemoryPages: uint32(*memoryPages), CallTimeout: *timeout, Instances: 1}
	load := func(path string) (*plugins.Module, error) {
		src, err := plugins.ReadSourceWithin(path, limits)
		if err != nil {
			return nil, err
		}
		src.Tenant, src.Limits, src.Config, src.ForReplay = *tenant, limits, cfg, true
		return rt.Load(ctx, src)
	}

	// The modules: the one given, or those of the directory by hash.
	var given *plugins.Module
	byHash := map[string]string{}          // hash → file
	loaded := map[string]*plugins.Module{} // hash → module
	if *module != "" {
		if given, err = load(*module); err != nil {
			return fail(1, "--module %s: %v", *module, err)
		}
	} else {
		if byHash, err = modulesByHash(*dir); err != nil {
			return fail(2, "--plugins %s: %v", *dir, err)
		}
	}

	var reports []plugins.Replay
	diverged := false
	for _, c := range calls {
		call := host.ToolCall{ID: c.Call.ID, SessionID: id, Name: c.Call.Name, Input: json.RawMessage(argsJSON(c.Call.Arguments))}
		m := given
		if m == nil {
			m = loaded[c.Result.Source]
			if m == nil {
				path, ok := byHash[c.Result.Source]
				if !ok {
					reports = append(reports, plugins.Replay{CallID: c.Call.ID, Tool: c.Call.Name, Verdict: plugins.ReplayNotReplayable,
						RecordedSource: c.Result.Source, Reason: fmt.Sprintf("its module %s is not in %s", c.Result.Source, *dir)})
					continue
				}
				if m, err = load(path); err != nil {
					reports = append(reports, plugins.Replay{CallID: c.Call.ID, Tool: c.Call.Name, Verdict: plugins.ReplayNotReplayable,
						RecordedSource: c.Result.Source, Reason: fmt.Sprintf("its module %s does not load: %v", path, err)})
					continue
				}
				loaded[c.Result.Source] = m
			}
		} else if _, ok := m.Tool(c.Call.Name); !ok {
			continue // another plugin's call
		}
		rp, err := plugins.ReplayCall(ctx, m, call, c.Result)
		if err != nil {
			return fail(1, "replaying %s: %v", c.Call.ID, err)
		}
		diverged = diverged || rp.Verdict == plugins.ReplayDiverged
		reports = append(reports, rp)
	}
	if len(reports) == 0 {
		return fail(1, "--module %s offers none of the tools the session's plugin calls called", *module)
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetEscapeHTML(false)
		for _, rp := range reports {
			if err := enc.Encode(rp); err != nil {
				return err
			}
		}
	} else {
		printReplays(env.Stdout, reports)
	}
	if diverged {
		return fail(1, "")
	}
	return nil
}

// printReplays prints a replay's verdict per call, with what diverged.
func printReplays(w io.Writer, reports []plugins.Replay) {
	for _, rp := range reports {
		switch rp.Verdict {
		case plugins.ReplayNotReplayable:
			fmt.Fprintf(w, "%s %s: not replayable: %s\n", rp.CallID, rp.Tool, rp.Reason)
		default:
			fmt.Fprintf(w, "%s %s: %s", rp.CallID, rp.Tool, rp.Verdict)
			if rp.Source != rp.RecordedSource && rp.RecordedSource != "" {
				fmt.Fprintf(w, " (on %s, recorded on %s)", shortHash(rp.Source), shortHash(rp.RecordedSource))
			}
			fmt.Fprintln(w)
			for _, d := range rp.Divergences {
				fmt.Fprintf(w, "  %s\n", d)
			}
		}
	}
}

// modulesByHash indexes the modules of a plugin directory, and of serve's
// versions kept in DIR/.versions, by their content hash.
func modulesByHash(dir string) (map[string]string, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("not a directory")
	}
	out := map[string]string{}
	var paths []string
	for _, d := range []string{dir, filepath.Join(dir, ".versions")} {
		found, _ := filepath.Glob(filepath.Join(d, "*.wasm"))
		paths = append(paths, found...)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if strings.HasPrefix(filepath.Base(p), ".") {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, io.LimitReader(f, plugins.DefaultMaxModuleBytes+1))
		f.Close()
		if err != nil {
			continue
		}
		hash := "sha256:" + hex.EncodeToString(h.Sum(nil))
		if _, ok := out[hash]; !ok {
			out[hash] = p
		}
	}
	return out, nil
}

// argsJSON is a model's tool arguments as the host gave them to the tool.
func argsJSON(args string) string {
	if strings.TrimSpace(args) == "" {
		return "{}"
	}
	return args
}
