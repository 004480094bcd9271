package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/provider"
	"github.com/agentichost/agentic/internal/demotools"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

// DefaultModel is the model chat uses when neither --model nor AGENTIC_MODEL
// names one.
const DefaultModel = "openai/gpt-4o-mini"

// modelFlags are the flags every command that runs an agent shares.
type modelFlags struct {
	session  string
	storage  string
	model    string
	system   string
	baseURL  string
	offline  bool
	maxSteps int
	idle     time.Duration
	timeouts host.AgentTimeouts
	compact  float64
	resume   bool
	// The agent's restart policy and overlap rule.
	onInterrupted string
	overlap       string
	leaseTTL      time.Duration
	plugins       string
	modelSet      bool       // --model or AGENTIC_MODEL named the model
	fallback      pluginList // --fallback: the agent's fallback models, in order
	extraBody     string     // --extra-body: host.Agent.ExtraBody, as JSON

	// The sandbox of the --plugins.
	pluginKV      bool
	pluginHosts   pluginList
	pluginGrants  pluginList
	pluginPrivate bool
	pluginConfig  pluginList
	pluginCompile time.Duration

	// Approvals.
	policy  string
	approve pluginList

	// MCP servers whose tools the agent takes.
	mcp mcpFlags

	// validators are registered with the host (Options.Validators); the
	// task command sets them.
	validators map[string]host.Validator

	// Blobs: host.Options.BlobThreshold, BlobQuota, MaxBlobBytes.
	blobThreshold, blobQuota, maxBlob int64

	logs bool          // print the runs' live events
	fs   *flag.FlagSet // for its logging flags

	// agent is the agent setup built the host with.
	agent host.Agent
}

func (m *modelFlags) register(fs *flag.FlagSet, env Env) {
	m.fs = fs
	fs.BoolVar(&m.logs, "logs", false, "print a line on stderr for each live event of the runs (run-start, step, retry, timeout, run-end, …), in --log-format")
	fs.StringVar(&m.session, "session", "cli", "session `ID`")
	fs.StringVar(&m.storage, "storage", DefaultStorage, storageHelp)
	model := env.Getenv("AGENTIC_MODEL")
	m.modelSet = model != ""
	if model == "" {
		model = DefaultModel
	}
	fs.Func("model", "model `ID` (default $AGENTIC_MODEL, else "+DefaultModel+"; with --offline, "+fakemodel.DefaultModel+")", func(v string) error {
		m.model, m.modelSet = v, true
		return nil
	})
	m.model = model
	fs.Var(&m.fallback, "fallback", "a model `ID` to ask when the model is not served or its retries run out (repeatable: tried in order)")
	fs.StringVar(&m.extraBody, "extra-body", "", "extra fields of each model request, a JSON `OBJECT`: OpenRouter's {\"models\": [a, b]} (its own fallback), \"provider\", \"reasoning\"")
	fs.StringVar(&m.system, "system", "", "system prompt")
	base := env.Getenv("OPENROUTER_BASE_URL")
	if base == "" {
		base = provider.DefaultBaseURL
	}
	fs.StringVar(&m.baseURL, "base-url", base, "OpenAI-compatible base `URL` (default from OPENROUTER_BASE_URL); the key comes from OPENROUTER_API_KEY")
	fs.BoolVar(&m.offline, "offline", false, "start the fake model in-process (no network) and offer the demo tools")
	fs.IntVar(&m.maxSteps, "max-steps", host.DefaultMaxSteps, "bound on model passes per run")
	fs.Int64Var(&m.blobThreshold, "blob-threshold", 0, "keep attachments and tool outputs above `BYTES` by reference in the storage's blobs/, once however often they are sent (0: 64 KiB; -1: every byte in the ledger)")
	fs.Int64Var(&m.blobQuota, "blob-quota", 0, "refuse a message whose attachments would bring the storage's blobs past `BYTES` (0: no quota)")
	fs.Int64Var(&m.maxBlob, "max-blob-bytes", 0, "refuse a message with an attachment (kept by reference) above `BYTES` (0: no bound)")
	fs.DurationVar(&m.idle, "idle-timeout", 60*time.Second, "fail (and retry) a model response whose connection stays silent for this `DURATION` (the HTTP client's bound)")
	fs.DurationVar(&m.timeouts.Total, "timeout-total", 0, "end a run timed_out once it has worked this `DURATION` (time waiting for approvals does not count; default: none)")
	fs.DurationVar(&m.timeouts.Step, "timeout-step", 0, "end a run timed_out when one step (a model pass and its tools) takes longer than this `DURATION` (default: none)")
	fs.DurationVar(&m.timeouts.FirstChunk, "timeout-first-chunk", 0, "cut and retry a model pass that streams nothing for this `DURATION` after the request; a run whose retries are spent ends timed_out (default: none)")
	fs.DurationVar(&m.timeouts.Chunk, "timeout-chunk", 0, "cut and retry a model pass whose stream falls silent for this `DURATION` (default: none)")
	fs.DurationVar(&m.timeouts.Tool, "timeout-tool", 0, fmt.Sprintf("bound on a tool call whose tool sets none; the model is told, and the run goes on (default %s)", host.DefaultToolTimeout))
	fs.StringVar(&m.plugins, "plugins", "", "offer the tools of the Wasm plugins in `DIR` (NAME.wasm, with NAME.json for plain Extism modules), reloaded as the files change")
	fs.BoolVar(&m.pluginKV, "plugin-kv", false, "give the --plugins their key-value store, kept in --storage")
	fs.Var(&m.pluginHosts, "plugin-allow-host", "let the --plugins reach `HOST` over HTTP (host: its default port, host:port, or *.domain; repeatable; default: no HTTP)")
	fs.BoolVar(&m.pluginPrivate, "plugin-allow-private", false, "let the --plugins reach loopback and private addresses")
	fs.Var(&m.pluginGrants, "plugin-grant", "grant one of the --plugins a share of the --plugin-* sandbox: `PLUGIN=HOST,kv,private` (any of them; repeatable); once one is given, a plugin not granted gets no HTTP and no key-value store")
	fs.Var(&m.pluginConfig, "plugin-config", "configuration `PLUGIN:KEY=VALUE` of one of the --plugins (repeatable)")
	fs.DurationVar(&m.pluginCompile, "plugin-compile-timeout", 0, fmt.Sprintf("bound on compiling one of the --plugins: a module past it is refused (default %s)", plugins.DefaultCompileTimeout))
	fs.StringVar(&m.policy, "policy", "", "decide every tool call with the policy of one of the --plugins: `PLUGIN[:NAME]` (default: calls with an external effect wait for approval, the others run)")
	fs.Var(&m.approve, "approve", "run `TOOL`'s calls without asking a person (repeatable; a policy's deny still denies)")
	m.mcp.register(fs, "offer")
	fs.StringVar(&m.onInterrupted, "on-interrupted", "resume", "what becomes of a run a process left interrupted: `ACTION` resume (go on where it stopped), restart (from scratch), fail, or leave (it stays interrupted: the next message is answered by a run of its own; /resume continues it)")
	fs.StringVar(&m.overlap, "overlap", "queue", "a message sent while the session's run works (from another chat or host): `RULE` queue (it joins that run), reject (it is refused, and nothing is appended), interrupt (that run is cancelled, and a run of its own answers it) or rollback (interrupt, and the model no longer sees the cancelled turn)")
	fs.BoolVar(&m.resume, "auto-resume", false, "resume the interrupted runs of every session in the storage, at start and (with a shared storage) whenever another host's lease lapses")
	fs.DurationVar(&m.leaseTTL, "lease-ttl", 0, "with a shared storage (redis), how long a dead host's sessions stay locked (default 15s)")
	fs.Float64Var(&m.compact, "compaction-limit", host.DefaultCompactionLimit, "compact the session when a prompt reaches this `FRACTION` of the model's context window")
}

// setup opens storage, starts the fake model when offline, and builds the
// host. The returned cleanup releases all of it.
func (m *modelFlags) setup(env Env) (*host.Host, func(), error) {
	store, closeStore, err := openStorage(m.storage)
	if err != nil {
		return nil, nil, fail(2, "%v", err)
	}
	cleanup := func() { closeStore() }
	if m.idle <= 0 {
		return nil, nil, fail(2, "--idle-timeout must be positive, got %s", m.idle)
	}
	pcfg := provider.Config{BaseURL: m.baseURL, APIKey: env.Getenv("OPENROUTER_API_KEY"), IdleTimeout: m.idle}
	for name, d := range map[string]time.Duration{"total": m.timeouts.Total, "step": m.timeouts.Step,
		"first-chunk": m.timeouts.FirstChunk, "chunk": m.timeouts.Chunk, "tool": m.timeouts.Tool} {
		if d < 0 {
			cleanup()
			return nil, nil, fail(2, "--timeout-%s must not be negative, got %s", name, d)
		}
	}
	switch host.ResumeAction(m.onInterrupted) {
	case host.ActionResume, host.ActionRestart, host.ActionFail, host.ActionLeave:
	default:
		cleanup()
		return nil, nil, fail(2, "--on-interrupted %q: want resume, restart, fail or leave", m.onInterrupted)
	}
	switch host.Overlap(m.overlap) {
	case host.OverlapQueue, host.OverlapReject, host.OverlapInterrupt, host.OverlapRollback:
	default:
		cleanup()
		return nil, nil, fail(2, "--overlap %q: want queue, reject, interrupt or rollback", m.overlap)
	}
	agent := host.Agent{Model: m.model, Fallback: m.fallback, System: m.system, MaxSteps: m.maxSteps, Timeouts: m.timeouts,
		OnInterrupted: host.ResumeAction(m.onInterrupted), Overlap: host.Overlap(m.overlap)}
	if m.extraBody != "" {
		err := json.Unmarshal([]byte(m.extraBody), &agent.ExtraBody)
		if err == nil && agent.ExtraBody == nil {
			err = errors.New("got null")
		}
		if err != nil {
			cleanup()
			return nil, nil, fail(2, "--extra-body: want a JSON object: %v", err)
		}
	}
	if m.offline {
		if !m.modelSet {
			agent.Model = fakemodel.DefaultModel
		}
		srv, err := fakemodel.Start(fakemodel.Options{})
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("start the fake model: %w", err)
		}
		cleanup = func() { srv.Close(); closeStore() }
		pcfg.BaseURL, pcfg.APIKey = srv.URL(), "offline"
		if m.plugins == "" {
			agent.Tools = append(agent.Tools, demotools.GetAccount())
		}
	}
	logger, err := newLogger(m.fs, env)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	var onEvent func(host.Event)
	if m.logs {
		if onEvent, err = eventPrinter(m.fs, env); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	if m.plugins != "" {
		if st, err := os.Stat(m.plugins); err != nil || !st.IsDir() {
			cleanup()
			return nil, nil, fail(2, "--plugins %s: not a directory (it holds NAME.wasm files; a single module goes in a directory of its own)", m.plugins)
		}
		sandbox, err := m.pluginSandbox(store)
		if err != nil {
			cleanup()
			return nil, nil, fail(2, "%v", err)
		}
		reg, stop, err := watchPlugins(m.plugins, logger, sandbox)
		if err != nil {
			cleanup()
			return nil, nil, fail(2, "--plugins %s: %v", m.plugins, err)
		}
		agent.Toolsets = append(agent.Toolsets, reg.Toolset(pluginTenant))
		prev := cleanup
		cleanup = func() { stop(); prev() }
		if m.policy != "" {
			module, name, _ := strings.Cut(m.policy, ":")
			pol := plugins.PolicyRef{Registry: reg, Tenant: pluginTenant, Module: module, Policy: name}
			if _, err := pol.Resolve(); err != nil {
				cleanup()
				return nil, nil, fail(2, "--policy %s: %v", m.policy, err)
			}
			agent.Policies = []host.Policy{pol}
		}
	}
	if m.mcp.any() {
		sources, err := m.openMCP(env, logger)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		for _, src := range sources {
			agent.Toolsets = append(agent.Toolsets, src)
		}
		prev := cleanup
		cleanup = func() {
			for _, src := range sources {
				src.Close()
			}
			prev()
		}
	} else if len(m.mcp.tokens) > 0 {
		cleanup()
		return nil, nil, fail(2, "--mcp-token-env names a --mcp server")
	} else if len(m.mcp.envs) > 0 {
		cleanup()
		return nil, nil, fail(2, "--mcp-env names a --mcp-stdio server")
	} else if len(m.mcp.trust) > 0 {
		cleanup()
		return nil, nil, fail(2, "--mcp-trust-annotations names a --mcp or --mcp-stdio server")
	}
	if m.policy != "" && m.plugins == "" {
		cleanup()
		return nil, nil, fail(2, "--policy names a plugin of --plugins DIR")
	}
	for _, tool := range m.approve {
		if agent.ToolApprovals == nil {
			agent.ToolApprovals = map[string]host.ApprovalMode{}
		}
		agent.ToolApprovals[tool] = host.ApproveAlways
	}
	if m.plugins == "" && (m.pluginKV || len(m.pluginHosts) > 0 || m.pluginPrivate || len(m.pluginConfig) > 0 || m.pluginCompile != 0) {
		cleanup()
		return nil, nil, fail(2, "the --plugin-* flags need --plugins DIR")
	}
	if m.compact <= 0 || m.compact > 1 {
		cleanup()
		return nil, nil, fail(2, "--compaction-limit must be in (0, 1], got %v", m.compact)
	}
	if !m.offline {
		if err := checkEndpoint(m.baseURL, pcfg.APIKey); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	// The host builds no client and reads no environment: the command
	// wires the model (OpenRouter, or any OpenAI-compatible endpoint).
	client, err := provider.New(pcfg)
	if err != nil {
		cleanup()
		return nil, nil, fail(2, "%v", err)
	}
	secret, err := approvalSecret(env, store)
	if err != nil {
		cleanup()
		return nil, nil, fail(1, "%v", err)
	}
	tel, stopTel, err := otelFromEnv(context.Background(), env)
	if err != nil {
		cleanup()
		return nil, nil, fail(2, "OpenTelemetry: %v", err)
	}
	cleanup = func(prev func()) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
			defer cancel()
			if err := stopTel(ctx); err != nil {
				logger.Warn("cannot flush the telemetry", "err", err)
			}
			prev()
		}
	}(cleanup)
	m.agent = agent
	opts := host.Options{Storage: store, Model: client, Agent: agent, Logger: logger, ApprovalSecret: secret, Telemetry: tel,
		Compaction: &host.Compaction{Limit: m.compact}, LeaseTTL: m.leaseTTL, Validators: m.validators, OnEvent: onEvent,
		BlobThreshold: m.blobThreshold, BlobQuota: m.blobQuota, MaxBlobBytes: m.maxBlob}
	if m.resume {
		opts.AutoResume = &host.AutoResume{}
	}
	h, err := host.New(opts)
	if err != nil {
		cleanup()
		return nil, nil, fail(2, "%v", err)
	}
	return h, func() {
		// The boot sweep finishes what it began (a command that ends
		// before the sweep reached a session would otherwise leave that
		// session's run where it was), and the runs still in flight get
		// a moment to finish; then they stop unrecorded: they stay
		// resumable.
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		select {
		case <-h.SweepDone():
		case <-ctx.Done():
		}
		h.Close(ctx)
		cleanup()
	}, nil
}

// closeGrace is how long a command waits, on its way out, for the boot
// auto-resume sweep to finish and for the runs it started to end, before
// leaving them interrupted for the next host.
const closeGrace = 5 * time.Second

func chat(ctx context.Context, args []string, env Env) error {
	fs := newFlags("chat", env)
	var m modelFlags
	m.register(fs, env)
	showUsage := fs.Bool("usage", false, "after the reply, print a line with the tokens and cost of the session so far (stderr)")
	var attach pluginList
	fs.Var(&attach, "attach", "send `FILE` (an image, audio, a PDF…) with the message (repeatable; interactive: with the first message)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: agentic-host chat [flags] [MESSAGE]\n\nWith MESSAGE, send it and stream the reply; without, chat interactively\n(/help lists the commands). Flags go anywhere; a message word that\nstarts with \"-\" goes after \"--\".\n\nFlags:\n")
		fs.PrintDefaults()
	}
	words, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var parts []ledger.Part // sent with the next message
	for _, path := range attach {
		p, err := readAttachment(path)
		if err != nil {
			return fail(2, "%v", err)
		}
		parts = append(parts, p)
	}
	h, cleanup, err := m.setup(env)
	if err != nil {
		return err
	}
	defer cleanup()
	if len(words) > 0 && strings.HasPrefix(m.storage, "memory:") {
		fmt.Fprintln(env.Stderr, "note: --storage memory: keeps nothing after this command (use file:DIR to keep the session)")
	}
	sess := h.Session(m.session)

	// Ctrl-C (or SIGTERM) cancels the run in flight, durably; at the
	// interactive prompt it quits.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var mu sync.Mutex
	var cancelRun context.CancelCauseFunc
	quit := make(chan struct{})
	go func() {
		for range sigs {
			mu.Lock()
			c := cancelRun
			mu.Unlock()
			if c == nil {
				close(quit)
				return
			}
			c(errCtrlC)
		}
	}()
	// runOne runs fn with a context that Ctrl-C cancels.
	runOne := func(fn func(ctx context.Context, p *printer) (host.RunResult, error)) (host.RunResult, error) {
		rctx, cancel := context.WithCancelCause(ctx)
		mu.Lock()
		cancelRun = cancel
		mu.Unlock()
		defer func() {
			mu.Lock()
			cancelRun = nil
			mu.Unlock()
			cancel(nil)
		}()
		p := &printer{w: env.Stdout}
		res, err := fn(rctx, p)
		p.finish()
		if context.Cause(rctx) == errCtrlC && err == nil {
			err = outcome(res, nil) // the user stopped it: go no further
		}
		return res, err
	}
	// resume finishes a run this session left interrupted (the process
	// died), as --on-interrupted says: resume goes on with it, restart
	// runs it again, fail ends it. (leave does nothing: the next message
	// closes the run as interrupted; /resume goes on with it.)
	resume := func(action host.ResumeAction) (host.RunResult, error) {
		return runOne(func(ctx context.Context, p *printer) (host.RunResult, error) {
			return sess.Resume(ctx, host.ResumeOptions{Action: action, OnProgress: func(ev host.Progress) {
				if ev.Type == host.ProgressResponseStart && !p.resumed {
					p.resumed = true
					p.write("[resuming an interrupted run]\n")
				}
				p.progress(ev)
			}})
		})
	}
	send := func(text string) (host.RunResult, error) {
		// A run this session left interrupted is finished first, so that
		// the conversation stays in order — unless the agent leaves it.
		res, err := host.RunResult{}, host.ErrNothingToResume
		if action := host.ResumeAction(m.onInterrupted); action != host.ActionLeave {
			res, err = resume(action)
		}
		switch {
		case errors.Is(err, host.ErrNothingToResume):
		case errors.Is(err, host.ErrLeadElsewhere):
			// Another host runs the session: the message joins its
			// run; if that host died, this one takes over (and
			// answers) once its lease lapses.
			holder, wait := "another host", "its lease"
			if held, ok := errors.AsType[*storage.LeaseHeldError](err); ok {
				holder = "host " + held.Holder
				if held.Left > 0 {
					wait = fmt.Sprintf("up to %s for its lease", held.Left.Round(100*time.Millisecond))
				}
			}
			fmt.Fprintf(env.Stderr, "[%s runs session %s: the message joins its run (if that host died, this one takes over: waiting %s)]\n", holder, m.session, wait)
		case err != nil:
			return res, err
		}
		return runOne(func(ctx context.Context, p *printer) (host.RunResult, error) {
			res, err := sess.Send(ctx, text, host.SendOptions{OnProgress: p.progress, Parts: parts})
			if err == nil {
				parts = nil // sent
			}
			switch {
			case err != nil:
			case res.Status == ledger.RunApprovalRequired:
				if events, err := sess.Events(ctx); err == nil && slices.Contains(ledger.PendingInputs(events), res.MessageID) {
					// The session's run waits for approval: the
					// message waits in it, to be answered once the
					// run goes on.
					fmt.Fprintf(env.Stderr, "[run %s waits for approval: the message is queued, and answered once the run goes on]\n", res.RunID)
				}
			case !p.streamed && res.Text != "":
				// The message joined a run another host leads: its
				// progress stayed there.
				p.write(res.Text)
			}
			return res, err
		})
	}

	printUsage := func(w io.Writer) {
		u, err := sess.Usage(ctx)
		if err != nil {
			fmt.Fprintf(env.Stderr, "usage: %v\n", err)
			return
		}
		fmt.Fprintln(w, usageLine(u))
	}
	if len(words) > 0 {
		res, err := send(strings.Join(words, " "))
		if *showUsage {
			printUsage(env.Stderr)
		}
		if err == nil && res.Status == ledger.RunApprovalRequired {
			tellParked(env.Stderr, m.session, res)
		}
		if err == nil && res.Status == ledger.RunWaiting {
			tellWaiting(env.Stderr, m.session, res)
		}
		return outcome(res, err)
	}

	fmt.Fprintf(env.Stderr, "Chatting in session %q (%s). /help for commands; Ctrl-D or /quit to leave.\n", m.session, m.storage)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(env.Stdin)
		sc.Buffer(make([]byte, 64*1024), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// readLine returns the next line typed; false at the end of input,
	// Ctrl-C at a prompt, or when ctx ends.
	readLine := func() (string, bool) {
		select {
		case line, ok := <-lines:
			return line, ok
		case <-quit:
		case <-ctx.Done():
		}
		return "", false
	}
	interrupted := func() bool {
		select {
		case <-quit:
			return true
		default:
			return false
		}
	}
	for {
		fmt.Fprint(env.Stdout, "> ")
		line, ok := readLine()
		if !ok {
			fmt.Fprintln(env.Stdout)
			return nil
		}
		line = strings.TrimSpace(line)
		switch line {
		case "":
			continue
		case "/quit", "/exit":
			return nil
		case "/help":
			fmt.Fprint(env.Stdout, chatHelp)
			continue
		case "/usage":
			printUsage(env.Stdout)
			continue
		case "/resume":
			res, err := resume(host.ActionResume)
			switch {
			case errors.Is(err, host.ErrNothingToResume):
				fmt.Fprintln(env.Stdout, "[no interrupted run to resume]")
			case err == nil && res.Status == ledger.RunApprovalRequired:
				tellParked(env.Stderr, m.session, res)
			default:
				if err := outcome(res, err); err != nil {
					fmt.Fprintf(env.Stderr, "%v\n", err)
				}
			}
			continue
		}
		if path, ok := strings.CutPrefix(line, "/attach "); ok {
			p, err := readAttachment(strings.TrimSpace(path))
			if err != nil {
				fmt.Fprintln(env.Stdout, err)
				continue
			}
			parts = append(parts, p)
			fmt.Fprintf(env.Stdout, "[%s (%s, %d bytes) goes with the next message]\n", strings.TrimSpace(path), p.MIME, len(p.Data))
			continue
		}
		if strings.HasPrefix(line, "/") && !strings.HasPrefix(line, "//") {
			fmt.Fprintf(env.Stdout, "unknown command %s (/help lists them; start a message with // to send a slash)\n", strings.Fields(line)[0])
			continue
		}
		line = strings.TrimPrefix(line, "/")
		res, err := send(line)
		// A call that waits for approval is asked about here; the run
		// goes on with the answers, and may ask again. Ctrl-C at that
		// prompt cancels the run, durably; the end of input leaves it
		// waiting, undecided, and the command exits 3 saying how to
		// decide.
		for err == nil && res.Status == ledger.RunApprovalRequired {
			var run *host.Run
			run, err = askApproval(ctx, sess, res, readLine, env)
			if err != nil {
				break
			}
			if run == nil {
				if interrupted() {
					reason := "cancelled at the approval prompt (Ctrl-C)"
					if !h.Cancel(m.session, reason) {
						return fail(1, "run %s: could not cancel it; it still waits for approval", res.RunID)
					}
					return fail(130, "run %s %s", res.RunID, reason)
				}
				tellParked(env.Stderr, m.session, res)
				return outcome(res, nil)
			}
			res, err = runOne(func(ctx context.Context, p *printer) (host.RunResult, error) { return follow(ctx, run, p) })
		}
		if err == nil && res.Status == ledger.RunApprovalRequired {
			tellParked(env.Stderr, m.session, res)
		}
		if err == nil && res.Status == ledger.RunWaiting {
			tellWaiting(env.Stderr, m.session, res)
		}
		if err := outcome(res, err); err != nil {
			fmt.Fprintf(env.Stderr, "%v\n", err)
		}
	}
}

// checkEndpoint refuses, before any request, a base URL that is not an
// http(s) URL (suggesting the form meant), and a missing API key for an
// endpoint that is not on this machine.
func checkEndpoint(base, key string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := base
		if !strings.Contains(hint, "://") {
			hint = "http://" + hint
		}
		if !strings.HasSuffix(strings.TrimSuffix(hint, "/"), "/v1") {
			hint = strings.TrimSuffix(hint, "/") + "/v1"
		}
		return fail(2, "--base-url %q is not an http(s) URL: did you mean %s?", base, hint)
	}
	if key != "" {
		return nil
	}
	switch h := u.Hostname(); {
	case h == "localhost", strings.HasSuffix(h, ".localhost"):
		return nil
	default:
		if ip := net.ParseIP(h); ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified()) {
			return nil
		}
	}
	return fail(2, "OPENROUTER_API_KEY is not set; use --offline, or --base-url for a local server (a local endpoint needs no key)")
}

// chatHelp lists the interactive commands.
const chatHelp = `Commands:
  /usage   tokens and cost of this session so far
  /resume  go on with the session's interrupted run (one --on-interrupted leave left)
  /attach FILE  send FILE (an image, audio, a PDF…) with the next message
  /help    this list
  /quit    leave (so does Ctrl-D); Ctrl-C stops the reply in flight
Anything else is sent as a message; start it with // to send one that
begins with a slash. Asked to approve a tool call: y approves, Enter or n
denies, anything else denies with that reason; Ctrl-C cancels the run,
Ctrl-D leaves the call waiting (decide it with agentic-host approve|deny).
`

// usageLine renders a session's usage in one line.
func usageLine(u ledger.SessionUsage) string {
	t := u.Total
	line := fmt.Sprintf("[usage: %d runs, %d prompt + %d completion tokens", len(u.Runs), t.PromptTokens, t.CompletionTokens)
	if t.CachedTokens > 0 {
		line += fmt.Sprintf(" (%d cached)", t.CachedTokens)
	}
	return line + fmt.Sprintf(", cost $%.6f]", u.Cost)
}

// errCtrlC is the cause of a run's context when the user pressed Ctrl-C.
var errCtrlC = errors.New("interrupted (Ctrl-C)")

// exitTimedOut is the exit status of a command whose run timed out, as
// timeout(1)'s.
const exitTimedOut = 124

// exitBusy is the exit status of a message refused because the session's
// run works (--overlap reject): EX_TEMPFAIL, try again later.
const exitBusy = 75

// outcome turns a run's result into the command's exit status.
func outcome(res host.RunResult, err error) error {
	if busy, ok := errors.AsType[*host.BusyError](err); ok {
		what := "is working"
		if busy.State == host.StateApprovalRequired {
			what = "waits for approval"
		}
		run := "run " + busy.RunID
		if busy.RunID == "" {
			run = "a run of another host"
		}
		return fail(exitBusy, "session %s is busy: %s %s, and --overlap reject refuses a message meanwhile (nothing was sent); send it again once that run ended", busy.SessionID, run, what)
	}
	if err != nil {
		return err
	}
	switch res.Status {
	case ledger.RunCompleted:
		return nil
	case ledger.RunCancelled:
		return fail(130, "run %s cancelled: %s", res.RunID, res.Reason)
	case ledger.RunTimedOut:
		return fail(exitTimedOut, "run %s timed out: %s", res.RunID, res.Reason)
	case ledger.RunApprovalRequired:
		ids := make([]string, len(res.Approvals))
		for i, a := range res.Approvals {
			ids[i] = a.ApprovalID
		}
		return fail(exitApproval, "run %s waits for approval of %s", res.RunID, strings.Join(ids, ", "))
	case ledger.RunWaiting:
		return fail(exitWaiting, "run %s waits for %s", res.RunID, waitsText(res.Waits))
	default:
		return fail(1, "run %s %s: %s", res.RunID, res.Status, res.Reason)
	}
}

// printer renders a run's progress for a terminal: the reply's text as it
// streams, and a line per tool call.
type printer struct {
	w        io.Writer
	midLine  bool   // the last write did not end a line
	resumed  bool   // the resume notice was printed
	streamed bool   // some text streamed
	item     string // the response item whose text streams
}

func (p *printer) write(s string) {
	if s == "" {
		return
	}
	io.WriteString(p.w, s)
	p.midLine = !strings.HasSuffix(s, "\n")
}

func (p *printer) newline() {
	if p.midLine {
		p.write("\n")
	}
}

func (p *printer) progress(ev host.Progress) {
	switch ev.Type {
	case host.ProgressText:
		p.streamed = true
		if ev.ResponseID != p.item {
			if p.item != "" {
				p.newline() // another item: a message queued into the run is answered
			}
			p.item = ev.ResponseID
			if ev.Offset > 0 {
				// A message that joined a run in flight sees its text
				// from the moment it was queued.
				p.write("…")
			}
		}
		p.write(ev.Delta)
	case host.ProgressToolStart:
		p.newline()
		p.write(fmt.Sprintf("[tool %s %s]\n", ev.Tool.Name, ev.Tool.Input))
	case host.ProgressToolEnd:
		status := "ok"
		if ev.Tool.IsError {
			status = "error"
		}
		p.write(fmt.Sprintf("[tool %s %s: %s]\n", ev.Tool.Name, status, oneLine(ev.Tool.Output, 200)))
	case host.ProgressApprovalRequested:
		p.newline()
		p.write(fmt.Sprintf("[tool %s waits for approval %s: %s]\n", ev.Approval.Tool, ev.Approval.ApprovalID, oneLine(ev.Approval.Reason, 200)))
	case host.ProgressApprovalDecided:
		p.newline()
		p.write(fmt.Sprintf("[approval %s of %s: %s]\n", ev.Approval.ApprovalID, ev.Approval.Tool, ev.Approval.State))
	case host.ProgressRetry:
		// The failed attempt's text stays on screen; the retry streams
		// the answer again below this line.
		p.newline()
		if ev.Retry.Fallback != "" {
			p.write(fmt.Sprintf("[falling back from %s to %s after attempt %d failed: %s]\n", ev.Retry.Model, ev.Retry.Fallback, ev.Retry.Attempt, oneLine(ev.Retry.Reason, 300)))
			break
		}
		delay := time.Duration(ev.Retry.DelayMS) * time.Millisecond
		p.write(fmt.Sprintf("[retrying in %s after attempt %d failed: %s]\n", delay, ev.Retry.Attempt, oneLine(ev.Retry.Reason, 300)))
	}
}

func (p *printer) finish() { p.newline() }

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
