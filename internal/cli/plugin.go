package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

const pluginUsage = `Usage:
  agentic-host plugin describe [flags] FILE.wasm          what the plugin offers, as JSON
  agentic-host plugin call [flags] FILE.wasm NAME [JSON]  call a tool (or validator, policy, or a
                                                          plain module's export) and print its output
  agentic-host plugin list [flags] --plugins DIR          the modules of a plugin directory as chat
                                                          --plugins loads them: hashes, what each
                                                          offers, name conflicts, refusals and why
  agentic-host plugin new [--lang go|ts|assemblyscript|c|rust] NAME [DIR]
                                                          write a plugin project with one tool
  agentic-host plugin build [DIR]                         build a plugin project into DIR/NAME.wasm
  agentic-host plugin held [--server URL]                 the versions a running serve holds because
                                                          they widen what their plugin offers
  agentic-host plugin approve|discard [--server URL] NAME HASH
                                                          load a held version, or drop it
  agentic-host plugin release [--server URL] NAME         let a quarantined plugin serve again
  agentic-host plugin audit [--server URL] [NAME]         the audit log of the tenant's plugins
  agentic-host plugin versions [--server URL] NAME        the version serving, and those it replaced
  agentic-host plugin rollback [--server URL] NAME [HASH] load a replaced version again
  agentic-host plugin canary [--share F] NAME FILE.wasm  serve a share of the sessions with a new version
  agentic-host plugin canary promote|rollback NAME        make the canary serve all, or drop it
  agentic-host plugin replay [flags] (--plugins DIR | --module FILE.wasm) SESSION [CALL_ID]
                                                          run a session's recorded plugin calls again
                                                          against their recorded traffic (no network):
                                                          same, diverged (where) or not replayable
  agentic-host plugin verify --trusted-key KEY FILE.wasm  check its minisign signature (FILE.wasm.minisig)
                                                          and say who signed it
  agentic-host plugin upload [--server URL] FILE.wasm [NAME]
                                                          upload it, with its signature, to a running serve
  agentic-host plugin pull oci://REGISTRY/REPO@sha256:HEX [DIR]
                                                          pull a module (and its signature) by digest

A plain Extism module (no describe export) is described by its sidecar
manifest FILE.json, if there is one; without it, "call" runs an export by
name with JSON (or any text) as its raw input. JSON "-" reads stdin;
omitted, it is {}.

Run "agentic-host plugin describe -h" for the sandbox flags.
`

// pluginCmd implements "agentic-host plugin": describe a plugin module,
// or call one of its tools (validators, policies, exports) once, in the
// sandbox the flags describe.
func pluginCmd(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, pluginUsage)
		return fail(2, "")
	}
	switch args[0] {
	case "describe":
		return pluginDescribe(ctx, args[1:], env)
	case "call":
		return pluginCall(ctx, args[1:], env)
	case "list":
		return pluginListCmd(ctx, args[1:], env)
	case "new":
		return pluginNewCmd(ctx, args[1:], env)
	case "build":
		return pluginBuildCmd(ctx, args[1:], env)
	case "held":
		return pluginHeldCmd(ctx, args[1:], env)
	case "approve":
		return pluginDecideCmd(ctx, args[1:], env, true)
	case "discard":
		return pluginDecideCmd(ctx, args[1:], env, false)
	case "release":
		return pluginReleaseCmd(ctx, args[1:], env)
	case "audit":
		return pluginAuditCmd(ctx, args[1:], env)
	case "rollback":
		return pluginRollbackCmd(ctx, args[1:], env)
	case "versions":
		return pluginVersionsCmd(ctx, args[1:], env)
	case "canary":
		return pluginCanaryCmd(ctx, args[1:], env)
	case "replay":
		return pluginReplayCmd(ctx, args[1:], env)
	case "verify":
		return pluginVerifyCmd(ctx, args[1:], env)
	case "upload":
		return pluginUploadCmd(ctx, args[1:], env)
	case "pull":
		return pluginPullCmd(ctx, args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, pluginUsage)
		return nil
	}
	fmt.Fprint(env.Stderr, pluginUsage)
	return fail(2, "unknown subcommand %q", args[0])
}

// pluginFlags are the sandbox and runtime flags of both subcommands.
type pluginFlags struct {
	tenant         string
	timeout        time.Duration
	compileTimeout time.Duration
	memoryPages    uint
	maxOutput      int
	allowHosts     pluginList
	allowPrivate   bool
	kv             bool
	storage        string
	config         pluginList
	cacheDir       string
	verbose        bool
	trust          trustFlags
	fs             *flag.FlagSet // for its logging flags

	signer *plugins.Signer // who signed the module loaded, verified with trust's keys
}

// pluginList is a repeatable string flag.
type pluginList []string

func (l *pluginList) String() string     { return strings.Join(*l, ",") }
func (l *pluginList) Set(s string) error { *l = append(*l, s); return nil }

func (f *pluginFlags) register(fs *flag.FlagSet, env Env) {
	fs.StringVar(&f.tenant, "tenant", "cli", "the `TENANT` the plugin runs for (its key-value scope)")
	fs.DurationVar(&f.timeout, "timeout", plugins.DefaultCallTimeout, "bound on one call, and on instantiating the module (busy loops are interrupted)")
	fs.DurationVar(&f.compileTimeout, "compile-timeout", 0, fmt.Sprintf("bound on compiling the module: a compile past it is stopped and the module refused (default %s)", plugins.DefaultCompileTimeout))
	fs.UintVar(&f.memoryPages, "memory-pages", plugins.DefaultMemoryPages, "memory limit in 64 KiB `PAGES`")
	fs.IntVar(&f.maxOutput, "max-output", plugins.DefaultMaxOutputBytes, "bound on a call's output, in `BYTES`")
	fs.Var(&f.allowHosts, "allow-host", "allow HTTP to `HOST` (host: its default port, host:port, or *.domain; repeatable; default: no HTTP)")
	fs.BoolVar(&f.allowPrivate, "allow-private", false, "allow HTTP to loopback and private addresses")
	fs.BoolVar(&f.kv, "kv", false, "enable the key-value store (in memory for this process, unless --storage)")
	fs.StringVar(&f.storage, "storage", "", "keep the --kv store in the storage at `URL` (memory:, file:DIR, redis://…), as chat --plugin-kv does")
	fs.Var(&f.config, "config", "plugin configuration `KEY=VALUE` (repeatable)")
	fs.StringVar(&f.cacheDir, "cache-dir", pluginDefaultCacheDir(env), "compilation cache `DIR` (\"\" for none)")
	f.trust.register(fs)
	setLogLevelDefault(fs, "info") // the plugin's own log lines, at info
	f.fs = fs
	fs.BoolVar(&f.verbose, "v", false, "also print the module hash and timings on stderr")
}

// pluginDefaultCacheDir is $AGENTIC_WASM_CACHE, else the user cache
// directory's agentic-host/wasm.
func pluginDefaultCacheDir(env Env) string {
	if d := env.Getenv("AGENTIC_WASM_CACHE"); d != "" {
		return d
	}
	base := env.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home := env.Getenv("HOME")
		if home == "" {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "agentic-host", "wasm")
}

func (f *pluginFlags) limits() (plugins.Limits, error) {
	if f.memoryPages > 65536 {
		return plugins.Limits{}, fmt.Errorf("--memory-pages %d is above 65536", f.memoryPages)
	}
	return plugins.Limits{
		MemoryPages:         uint32(f.memoryPages),
		CallTimeout:         f.timeout,
		CompileTimeout:      f.compileTimeout,
		MaxOutputBytes:      f.maxOutput,
		Instances:           1,
		KV:                  f.kv,
		AllowedHosts:        f.allowHosts,
		AllowPrivateNetwork: f.allowPrivate,
	}, nil
}

// load reads FILE.wasm (and its sidecar) and loads it in a new runtime.
func (f *pluginFlags) load(ctx context.Context, path string, env Env) (*plugins.Module, func(), error) {
	logger, err := newLogger(f.fs, env)
	if err != nil {
		return nil, nil, err
	}
	limits, err := f.limits()
	if err != nil {
		return nil, nil, fail(2, "%v", err)
	}
	cfg := map[string]string{}
	for _, kv := range f.config {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, nil, fail(2, "--config %q: want KEY=VALUE", kv)
		}
		cfg[k] = v
	}
	if f.cacheDir != "" {
		if err := os.MkdirAll(f.cacheDir, 0o755); err != nil {
			f.cacheDir = "" // a cache is an optimisation: run without one
		}
	}
	opts := plugins.Options{
		CacheDir: f.cacheDir,
		Logger:   logger,
	}
	closeStore := func() {}
	if f.storage != "" {
		if !f.kv {
			return nil, nil, fail(2, "--storage keeps the key-value store: it needs --kv")
		}
		store, closeFn, err := openStorage(f.storage)
		if err != nil {
			return nil, nil, fail(2, "%v", err)
		}
		kv, ok := store.(storage.KV)
		if !ok {
			_ = closeFn()
			return nil, nil, fail(2, "storage %s cannot keep values", f.storage)
		}
		opts.KV, closeStore = kv, func() { _ = closeFn() }
	}
	rt, err := plugins.NewRuntime(opts)
	if err != nil {
		closeStore()
		return nil, nil, fail(1, "%v", err)
	}
	closeRT := func() { _ = rt.Close(context.Background()); closeStore() }
	src, err := plugins.ReadSourceWithin(path, limits)
	if err != nil {
		closeRT()
		return nil, nil, fail(1, "%v", err)
	}
	src.Tenant, src.Limits, src.Config = f.tenant, limits, cfg
	ring, err := f.trust.keyring()
	if err != nil {
		closeRT()
		return nil, nil, fail(2, "%v", err)
	}
	if ring != nil {
		// As a serve whose tenant trusts these keys: before compiling.
		s, err := ring.Verify(src.Wasm, src.Signature)
		if err != nil {
			closeRT()
			return nil, nil, fail(1, "%s: %v", path, err)
		}
		f.signer = &s
	}
	start := time.Now()
	m, err := rt.Load(ctx, src)
	if err != nil {
		closeRT()
		return nil, nil, fail(1, "%v", err)
	}
	if f.verbose {
		fmt.Fprintf(env.Stderr, "loaded %s (%s) in %s\n", m.Name(), m.Hash(), time.Since(start).Round(time.Millisecond))
	}
	return m, closeRT, nil
}

func pluginDescribe(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin describe", env)
	var f pluginFlags
	f.register(fs, env)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin describe [flags] FILE.wasm\n\nPrint what the plugin offers as JSON: its tools, validators and policies\n(or, for a plain module without a sidecar manifest, its exports).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fail(2, "want exactly one FILE.wasm, got %d arguments", len(pos))
	}
	m, done, err := f.load(ctx, pos[0], env)
	if err != nil {
		return err
	}
	defer done()
	out := struct {
		Module     string                         `json:"module"`
		Hash       string                         `json:"hash"`
		Described  bool                           `json:"described"`
		ABI        string                         `json:"abi,omitempty"`
		Tools      []plugins.ToolDescription      `json:"tools,omitempty"`
		Validators []plugins.ValidatorDescription `json:"validators,omitempty"`
		Policies   []plugins.PolicyDescription    `json:"policies,omitempty"`
		Needs      *plugins.Needs                 `json:"needs,omitempty"`
		Exports    []string                       `json:"exports"`
		// Grants are what the module may do, as it would run: the
		// sandbox flags, narrowed to its needs.
		Grants      plugins.Grant `json:"grants"`
		Fingerprint string        `json:"fingerprint,omitempty"`
		// Signature is who signed it (FILE.wasm.minisig): verified when
		// --trusted-key or --trusted-key-file is given, else as the
		// signature says.
		Signature *plugins.Signer `json:"signature,omitempty"`
	}{Module: m.Name(), Hash: m.Hash(), Described: m.Described(), Exports: m.Exports(), Grants: plugins.GrantOf(m.Limits()), Fingerprint: m.Fingerprint(), Signature: m.Signer()}
	if f.signer != nil {
		out.Signature = f.signer
	}
	if m.Described() {
		d := m.Description()
		out.ABI, out.Tools, out.Validators, out.Policies, out.Needs = d.ABI, d.Tools, d.Validators, d.Policies, d.Needs
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func pluginCall(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin call", env)
	var f pluginFlags
	f.register(fs, env)
	callID := fs.String("call-id", "cli-call", "the call `ID` (a tool's idempotency key)")
	session := fs.String("session", "cli", "the `SESSION` id the call reports")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host plugin call [flags] FILE.wasm NAME [JSON]\n\n"+
			"Call the tool NAME with JSON as its input and print its output. NAME may\n"+
			"also be a validator (JSON is the deliverable), a policy (JSON is\n"+
			"{\"tool\":…,\"effect\":…,\"input\":…}), or an export of the module (JSON is its raw\n"+
			"input). JSON \"-\" reads stdin; omitted, it is {}.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 || len(pos) > 3 {
		fs.Usage()
		return fail(2, "want FILE.wasm NAME [JSON], got %d arguments", len(pos))
	}
	input := []byte("{}")
	if len(pos) == 3 {
		input = []byte(pos[2])
		if pos[2] == "-" {
			if input, err = io.ReadAll(env.Stdin); err != nil {
				return fail(1, "reading stdin: %v", err)
			}
		}
	}
	m, done, err := f.load(ctx, pos[0], env)
	if err != nil {
		return err
	}
	defer done()
	name := pos[1]
	start := time.Now()
	defer func() {
		if f.verbose {
			fmt.Fprintf(env.Stderr, "called %s in %s\n", name, time.Since(start).Round(time.Microsecond))
		}
	}()
	needJSON := func(what string) error {
		if !json.Valid(input) {
			return fail(2, "the %s input is not valid JSON: %s", what, pluginSnippet(input))
		}
		return nil
	}

	if tool, ok := m.Tool(name); ok {
		if err := needJSON("tool"); err != nil {
			return err
		}
		res, err := tool.Call(ctx, host.ToolCall{ID: *callID, SessionID: *session, Name: name, Input: input})
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintln(env.Stdout, res.Output)
		return nil
	}
	if v, ok := m.Validator(name); ok {
		if err := needJSON("deliverable"); err != nil {
			return err
		}
		value, problems, err := v.Validate(ctx, input)
		if err != nil {
			return fail(1, "%v", err)
		}
		if err := pluginPrintJSON(env, map[string]any{"ok": problems == nil, "value": value, "errors": problems}); err != nil {
			return err
		}
		if problems != nil {
			return fail(1, "invalid deliverable")
		}
		return nil
	}
	if p, ok := m.Policy(name); ok {
		if err := needJSON("policy"); err != nil {
			return err
		}
		var req struct {
			Tool   string          `json:"tool"`
			Effect host.Effect     `json:"effect"`
			Input  json.RawMessage `json:"input"`
			Agent  string          `json:"agent"`
		}
		if err := json.Unmarshal(input, &req); err != nil {
			return fail(2, "the policy input: %v (want {\"tool\":…,\"effect\":…,\"input\":…})", err)
		}
		d, err := p.Decide(ctx, host.PolicyRequest{Tool: host.ToolSpec{Name: req.Tool, Effect: req.Effect}, Input: req.Input, SessionID: *session, Agent: req.Agent})
		if err != nil {
			return fail(1, "%v", err)
		}
		return pluginPrintJSON(env, map[string]any{"decision": d.Verdict, "reason": d.Reason, "summary": d.Summary})
	}
	for _, e := range m.Exports() {
		if e == name {
			out, err := m.CallExport(ctx, name, input)
			if err != nil {
				return fail(1, "%v", err)
			}
			env.Stdout.Write(out)
			if len(out) > 0 && out[len(out)-1] != '\n' {
				fmt.Fprintln(env.Stdout)
			}
			return nil
		}
	}
	return fail(1, "%s offers no tool, validator, policy or export %q (%s)", m.Name(), name, pluginOffers(m))
}

// pluginOffers lists what a module offers, for an error message.
func pluginOffers(m *plugins.Module) string {
	var names []string
	for _, t := range m.Tools() {
		names = append(names, "tool "+t.Spec().Name)
	}
	d := m.Description()
	for _, v := range d.Validators {
		names = append(names, "validator "+v.Name)
	}
	for _, p := range d.Policies {
		names = append(names, "policy "+p.Name)
	}
	if len(names) == 0 {
		for _, e := range m.Exports() {
			if !strings.HasPrefix(e, "_") {
				names = append(names, "export "+e)
			}
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "it offers nothing"
	}
	return "it offers: " + strings.Join(names, ", ")
}

func pluginPrintJSON(env Env, v any) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return errors.Join(fail(1, "encoding the answer"), err)
	}
	return nil
}

func pluginSnippet(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
