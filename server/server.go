package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcpclient"
	"github.com/agentichost/agentic/schedule"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/webhook"
)

// Options are what a [Server] is built from: its configuration, and the
// pieces the program wires (the storage, the model).
type Options struct {
	// Config is the service's configuration. Its Storage and Model fields
	// are for the program that opens them; the server uses Storage and
	// Model below.
	Config Config
	// Storage keeps every tenant's sessions (each under a prefix of its
	// own, see storage.Prefix) and the keys. It must implement
	// storage.Lister and storage.KV, as every built-in store does.
	// Required.
	Storage storage.Storage
	// Model streams model passes. Required.
	Model host.Model
	// ApprovalSecret keys approval tokens; every host sharing the storage
	// must share it. Default: nil, a random one for the life of the
	// server.
	ApprovalSecret []byte
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
	// Telemetry traces the runs (its TracerProvider); the runs' metrics go
	// to the server's /metrics whatever its MeterProvider. Default: nil.
	Telemetry *host.Telemetry
	// Version is the server's build, announced to the other hosts sharing
	// the storage with the ledger features it reads. Default: "".
	Version string

	// The schedules' clock and poll (tests; see export_test.go).
	scheduleNow  func() time.Time
	schedulePoll time.Duration
}

// Server is the multi-tenant HTTP + SSE service: an http.Handler over one
// host per tenant. Runs belong to the hosts, never to the requests that
// start or watch them.
type Server struct {
	cfg   Config
	store storage.Storage
	// agreement announces the ledger features this process reads, on a
	// shared storage; nil otherwise.
	agreement *host.Agreement
	kv        storage.KV
	tracing   bool // the runs make spans: responses name their traces
	keys      *keyring
	log       *slog.Logger
	tenants   map[string]*tenant
	// admitting counts the admissions of new runs in progress, for the
	// process's bound (max_runs; see admitProcess).
	admitting atomic.Int64
	// relays are the goroutines of the event streams that took their
	// connections over from net/http (newEventStream).
	relays sync.WaitGroup
	// runq is the queue of new runs past max_runs (queue_runs); nil
	// without one.
	runq     *runQueue
	mux      *http.ServeMux
	patterns []string // the authenticated routes, as registered (see Routes)
	metrics  *metrics
	audit    *audit

	rt       *plugins.Runtime
	registry *plugins.Registry
	watchers []*plugins.DirWatcher
	plugins  configPlugins // the tenants' plugins of the configuration (oci://)
	stopBg   context.CancelFunc
	bg       sync.WaitGroup // the server's own goroutines (the outboxes), until stopBg

	schedules     sync.WaitGroup // the tenants' schedule runners
	stopSchedules func()         // stops them (and waits), as the server drains

	streams streamSlots // the open event streams, per key, tenant and in all
	// uploads holds a token per module upload read and loaded
	// (max_plugin_uploads).
	uploads  chan struct{}
	onUpload func() // tests: called once an upload holds its places

	closing  atomic.Bool
	imports  atomic.Int64  // imports in progress in the process, for MaxImports
	done     chan struct{} // closed as Close begins: the tenants' feeds end
	doneOnce sync.Once
	tasks    sync.WaitGroup // tasks the server runs for POST /v1/tasks
}

// tenant is one tenant's runtime.
type tenant struct {
	name    string
	cfg     TenantConfig
	storage storage.Storage // the tenant's prefix of the server's storage
	host    *host.Host
	agents  map[string]host.Agent
	def     host.Agent    // the agent of a request that names none
	limiter *rate.Limiter // nil: no request bound
	users   users         // the end users' bounds (rate_limit.per_user)
	// waitingTokens counts the requests waiting for a token of limiter
	// (rate_limit.queue_requests).
	waitingTokens atomic.Int64
	slots         runSlots     // runs in flight in this host, for RateLimit.ConcurrentRuns
	imports       atomic.Int64 // imports in progress, for RateLimit.ConcurrentImports
	budget        *budget      // nil: no budget
	// evalBudget is what the tenant's evaluations spend from: their own
	// budget (eval_budget_usd_per_day), else the tenant's; nil: none.
	evalBudget *budget
	fuel       *fuelBudget // nil: no plugin budget
	model      host.Model  // the model the tenant's agents run on (and POST /v1/eval's candidate)

	pluginsMu sync.Mutex                   // uploads and removals of the tenant's modules take turns
	uploads   chan struct{}                // a token while a module upload is read and loaded: one at a time
	feed      feed                         // the changes of the tenant's sessions, for GET /v1/feed
	mcp       map[string]*mcpclient.Source // its MCP servers, by name
	outbox    *webhook.Outbox              // its webhooks; nil: none
	schedules *schedule.Runner             // its schedules
	// schedulesMu makes POST /v1/schedules take turns (max_schedules).
	schedulesMu sync.Mutex
}

// New builds the server: a host per tenant over its prefix of the storage,
// each tenant's plugins loaded from PluginsDir/TENANT (and hot-reloaded),
// and the routes. It returns every problem of the configuration at once.
func New(opts Options) (*Server, error) {
	var problems []error
	cfg, err := opts.Config.normalized()
	if err != nil {
		problems = append(problems, fmt.Errorf("server: config: %w", err))
	}
	if opts.Storage == nil || opts.Model == nil {
		problems = append(problems, errors.New("server: Options.Storage and Options.Model are required"))
	}
	kv, ok := opts.Storage.(storage.KV)
	if _, lists := opts.Storage.(storage.Lister); opts.Storage != nil && (!ok || !lists) {
		problems = append(problems, errors.New("server: the storage must list sessions and keep values (storage.Lister and storage.KV)"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.MetricsKey == "" && !loopbackListen(cfg.Listen) {
		log.Warn("/metrics refuses every request (it names the tenants): set metrics_key, or listen on a loopback address", "listen", cfg.Listen)
	}
	s := &Server{cfg: cfg, store: opts.Storage, kv: kv, keys: newKeyring(kv, cfg.Tenants), log: log,
		tenants: map[string]*tenant{}, mux: http.NewServeMux(), done: make(chan struct{}), uploads: make(chan struct{}, cfg.MaxPluginUploads)}
	if cfg.QueueRuns > 0 {
		s.runq = newRunQueue(cfg.QueueRuns)
	}
	if s.metrics, err = newMetrics(); err != nil {
		return nil, err
	}
	counter, _ := opts.Storage.(storage.Counter)
	s.audit = &audit{kv: kv, counter: counter, host: hostIDOf(cfg.HostID), actors: map[string]string{}}
	if _, shared := opts.Storage.(storage.Leaser); shared {
		// One announcement for the process, at the store's root: every
		// tenant's host writes by it.
		ttl := cmp.Or(time.Duration(cfg.LeaseTTL), host.DefaultLeaseTTL)
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		s.agreement, err = host.NewAgreement(ctx, host.AgreementOptions{Storage: opts.Storage, Host: hostIDOf(cfg.HostID), Version: opts.Version,
			Features: cfg.ledgerFeatures(), TTL: ttl, Logger: log})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	bg, stop := context.WithCancel(context.Background())
	s.stopBg = stop
	if err := s.startPlugins(bg); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	tel := &host.Telemetry{MeterProvider: s.metrics.provider}
	if opts.Telemetry != nil {
		tel.TracerProvider, tel.RecordContent = opts.Telemetry.TracerProvider, opts.Telemetry.RecordContent
		s.tracing = tel.TracerProvider != nil
	}
	var errs []error
	for _, name := range sortedKeys(cfg.Tenants) {
		t, err := s.newTenant(name, cfg.Tenants[name], opts, tel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.tenants[name] = t
	}
	if err := errors.Join(errs...); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	if err := s.metrics.observeQueues(s.tenants, s.runq); err != nil {
		s.Close(context.Background())
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	for _, t := range s.tenants {
		s.runOutbox(bg, t)
	}
	s.runSchedules()
	s.runRetention(bg)
	s.routes()
	return s, nil
}

// startPlugins starts the runtime and registry of the tenants' plugins,
// and watches each tenant's directory.
func (s *Server) startPlugins(ctx context.Context) error {
	rt, err := plugins.NewRuntime(plugins.Options{CacheDir: s.cfg.PluginCacheDir, Logger: s.log, KV: s.kv})
	if err != nil {
		return fmt.Errorf("server: plugins: %w", err)
	}
	s.rt = rt
	s.registry = plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(tenant string) plugins.Limits {
		return s.cfg.Tenants[tenant].Sandbox.limits()
	}, Config: func(tenant, module string) map[string]string {
		return s.cfg.Tenants[tenant].PluginConfig[module]
	}, Grants: func(tenant, module string) plugins.Grant {
		return s.cfg.Tenants[tenant].Sandbox.grant(module)
	}, Quarantine: func(tenant string) plugins.QuarantinePolicy {
		return s.cfg.Tenants[tenant].Sandbox.Quarantine.policy()
	}, Trust: func(tenant string) *plugins.Keyring {
		return s.cfg.Tenants[tenant].Sandbox.keyring
	}, HoldWidening: true, OnChange: s.onPluginChange})
	if err := s.metrics.observePlugins(s.registry); err != nil {
		return fmt.Errorf("server: plugins: %w", err)
	}
	if s.cfg.PluginsDir == "" {
		for _, name := range sortedKeys(s.cfg.Tenants) {
			s.pullPlugins(ctx, name)
		}
		return nil
	}
	for _, name := range sortedKeys(s.cfg.Tenants) {
		dir := filepath.Join(s.cfg.PluginsDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("server: plugins of %s: %w", name, err)
		}
		s.rememberVersions(name)
		w, err := s.registry.Watch(ctx, name, dir, plugins.WatchOptions{})
		if err != nil {
			return fmt.Errorf("server: plugins of %s: %w", name, err)
		}
		s.watchers = append(s.watchers, w)
		s.holdAgain(ctx, name)
		s.pullPlugins(ctx, name)
		s.startCanaries(ctx, name)
	}
	return nil
}

// limits maps a tenant's sandbox onto the plugins' Limits.
func (c SandboxConfig) limits() plugins.Limits {
	return plugins.Limits{AllowedHosts: c.AllowedHosts, AllowPrivateNetwork: c.AllowPrivateNetwork, KV: c.KV,
		MemoryPages: c.MemoryPages, CallTimeout: time.Duration(c.CallTimeout), Fuel: c.Fuel, MaxOutputBytes: c.MaxOutputBytes, Instances: c.Instances, WarmInstances: c.WarmInstances,
		CompileTimeout: time.Duration(c.CompileTimeout)}
}

// newTenant builds a tenant's host and agents.
func (s *Server) newTenant(name string, tc TenantConfig, opts Options, tel *host.Telemetry) (_ *tenant, err error) {
	store, err := storage.Prefix(s.store, name+":")
	if err != nil {
		return nil, fmt.Errorf("server: tenant %s: %w", name, err)
	}
	t := &tenant{name: name, cfg: tc, storage: store, agents: map[string]host.Agent{}, uploads: make(chan struct{}, 1)}
	if r := tc.RateLimit.RequestsPerSecond; r > 0 {
		burst := tc.RateLimit.Burst
		if burst == 0 {
			burst = max(int(2*r), 1)
		}
		t.limiter = rate.NewLimiter(rate.Limit(r), burst)
	}
	if tc.BudgetUSDPerDay > 0 {
		counter, _ := s.store.(storage.Counter)
		t.budget = newBudget(s.kv, counter, name, tc.BudgetUSDPerDay, hostIDOf(s.cfg.HostID))
		t.budget.log = s.log
	}
	t.evalBudget = t.budget
	if tc.EvalBudgetUSDPerDay > 0 {
		counter, _ := s.store.(storage.Counter)
		t.evalBudget = newBudget(s.kv, counter, name, tc.EvalBudgetUSDPerDay, hostIDOf(s.cfg.HostID))
		t.evalBudget.log = s.log
		t.evalBudget.eval = true
	}
	askCounter, _ := s.store.(storage.Counter)
	if tc.BudgetAsk != nil && askCounter == nil {
		return nil, fmt.Errorf("tenant %s: budget_ask needs a storage that keeps counters (memory, file and redis do)", name)
	}
	if tc.BudgetAsk != nil && t.budget != nil {
		t.budget.raise = newRaise(askCounter, name, kindBudget, micro(tc.BudgetAsk.RaiseUSD))
	}
	if tc.PluginFuelPerDay > 0 {
		counter, ok := s.store.(storage.Counter)
		if !ok {
			return nil, fmt.Errorf("tenant %s: plugin_fuel_per_day needs a storage that keeps counters (memory, file and redis do)", name)
		}
		t.fuel = &fuelBudget{counter: counter, tenant: name, limit: tc.PluginFuelPerDay, log: s.log}
		if tc.BudgetAsk != nil {
			t.fuel.ask = &fuelAsk{raise: newRaise(counter, name, kindPluginBudget, tc.BudgetAsk.RaiseFuel)}
		}
	}
	// The MCP servers' first connections are bounded: one that does not
	// answer is retried in the background, its tools missing meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = s.openMCP(ctx, t)
	cancel()
	// A tenant that fails to build closes the MCP connections it opened
	// (the sessions of remote servers, the processes of local ones).
	defer func() {
		if err != nil {
			t.closeMCP()
		}
	}()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, an := range sortedKeys(tc.Agents) {
		a, err := s.agent(t, an, tc.Agents[an])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.agents[an] = a
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := addDelegates(t.agents, tc.Agents); err != nil {
		return nil, fmt.Errorf("server: tenant %s: %w", name, err)
	}
	def, ok := t.agents["default"]
	if !ok {
		def = t.agents[sortedKeys(t.agents)[0]]
	}
	t.def = def
	t.model = opts.Model
	hopts := host.Options{Storage: store, Model: opts.Model, Agent: def, Logger: s.log.With("tenant", name), Tenant: name,
		ApprovalSecret: opts.ApprovalSecret, HostID: s.cfg.HostID, LeaseTTL: time.Duration(s.cfg.LeaseTTL),
		Agreement: s.agreement, Features: s.cfg.ledgerFeatures(),
		Compaction: &host.Compaction{Limit: tc.CompactionLimit}, Telemetry: tel, OnEvent: func(e host.Event) { s.onEvent(t, e) },
		BlobThreshold: s.cfg.BlobThreshold, BlobQuota: tc.BlobQuotaBytes, MaxBlobBytes: tc.MaxBlobBytes,
		// A delegate's child run is admitted as a message of the API is.
		Delegation: host.DelegateLimits{MaxDepth: tc.Delegation.MaxDepth, MaxPerRun: tc.Delegation.MaxPerRun, MaxPerMessage: tc.Delegation.MaxPerMessage,
			Admit: func(ctx context.Context, id string) (func(), error) { return s.admitSource(ctx, t, id, sourceDelegate) }}}
	if t.outbox, err = s.newOutbox(t); err != nil {
		return nil, fmt.Errorf("server: tenant %s: webhooks: %w", name, err)
	}
	if t.outbox != nil {
		hopts.Outbox = t.outbox
	}
	if t.budget != nil {
		hopts.Hooks = append(hopts.Hooks, t.budget.hook())
	}
	if t.fuel != nil {
		hopts.Hooks = append(hopts.Hooks, t.fuel.hook())
	}
	if *s.cfg.AutoResume {
		// A resumed run goes on with the agent it started with.
		hopts.AutoResume = &host.AutoResume{MaxAttempts: s.cfg.ResumeMaxAttempts, AgentFor: t.runAgent}
	}
	h, err := host.New(hopts)
	if err != nil {
		return nil, fmt.Errorf("server: tenant %s: %w", name, err)
	}
	t.host = h
	if t.schedules, err = s.newSchedules(t, opts); err != nil {
		h.Close(context.Background())
		return nil, fmt.Errorf("server: tenant %s: %w", name, err)
	}
	return t, nil
}

// runAgent returns the agent the session's last run started with (the
// default agent when the tenant has no agent of that name any more).
func (t *tenant) runAgent(ctx context.Context, sessionID string) (host.Agent, error) {
	events, err := t.storage.Load(ctx, sessionID)
	if err != nil {
		return host.Agent{}, err
	}
	for i := len(events) - 1; i >= 0; i-- {
		if rs := events[i].RunStart; rs != nil {
			if a, ok := t.agents[rs.Agent]; ok {
				return a, nil
			}
			break
		}
	}
	return t.def, nil
}

// addDelegates gives each agent a tool per agent its delegate_to names
// (host.NewDelegateTool), children first, so that a child offers its own
// sub-agents too. The configuration was checked for cycles.
func addDelegates(agents map[string]host.Agent, cfg map[string]AgentConfig) error {
	done := map[string]bool{}
	var resolve func(an string, depth int) error
	resolve = func(an string, depth int) error {
		if done[an] {
			return nil
		}
		if depth > len(cfg) {
			return fmt.Errorf("agents.%s: delegate_to forms a cycle", an)
		}
		a := agents[an]
		for _, d := range cfg[an].DelegateTo {
			if err := resolve(d, depth+1); err != nil {
				return err
			}
			tool, err := host.NewDelegateTool(host.Delegate{Agent: agents[d], Description: cfg[d].Description})
			if err != nil {
				return fmt.Errorf("agents.%s: delegate_to %s: %w", an, d, err)
			}
			a.Tools = append(a.Tools, tool)
		}
		agents[an], done[an] = a, true
		return nil
	}
	for _, an := range sortedKeys(cfg) {
		if err := resolve(an, 0); err != nil {
			return err
		}
	}
	return nil
}

// onlyModel makes agent ask model m alone: no fallback of the host's, nor
// of the endpoint's (extra_body's models, route).
func onlyModel(agent *host.Agent, m string) {
	agent.Model, agent.Fallback = m, nil
	_, models := agent.ExtraBody["models"]
	_, route := agent.ExtraBody["route"]
	if models || route {
		extra := maps.Clone(agent.ExtraBody)
		delete(extra, "models")
		delete(extra, "route")
		agent.ExtraBody = extra
	}
}

// agent builds one of a tenant's agents.
func (s *Server) agent(t *tenant, name string, ac AgentConfig) (host.Agent, error) {
	tenant := t.name
	a := host.Agent{Name: name, Model: ac.Model, System: ac.System, MaxSteps: ac.MaxSteps, MaxTokens: ac.MaxTokens,
		Toolsets: []host.Toolset{pluginTools{reg: s.registry, tenant: tenant, only: ac.Plugins}, mcpTools{t: t, only: ac.MCP}},
		Timeouts: host.AgentTimeouts{Total: time.Duration(ac.Timeouts.Total), Step: time.Duration(ac.Timeouts.Step),
			FirstChunk: time.Duration(ac.Timeouts.FirstChunk), Chunk: time.Duration(ac.Timeouts.Chunk), Tool: time.Duration(ac.Timeouts.Tool)},
		OnInterrupted: host.ResumeAction(ac.OnInterrupted), Overlap: host.Overlap(ac.Overlap)}
	if len(ac.Models) > 1 {
		a.Fallback = ac.Models[1:]
	}
	a.ExtraBody = ac.ExtraBody
	if ac.CompactionLimit > 0 {
		a.Compaction = &host.Compaction{Limit: ac.CompactionLimit}
	}
	if ac.Retry != nil {
		p := ac.Retry.policy()
		a.Retry = &p
	}
	if ac.Policy != "" {
		module, policy, _ := strings.Cut(ac.Policy, ":")
		a.Policies = []host.Policy{plugins.PolicyRef{Registry: s.registry, Tenant: tenant, Module: module, Policy: policy}}
	}
	if len(ac.Approve) > 0 {
		a.ToolApprovals = map[string]host.ApprovalMode{}
		for _, tool := range ac.Approve {
			a.ToolApprovals[tool] = host.ApproveAlways
		}
	}
	return a, nil
}

// pluginTools offers a tenant's plugin tools, or those of some of its
// modules only.
type pluginTools struct {
	reg    *plugins.Registry
	tenant string
	only   []string // module names; none: every module
}

func (p pluginTools) Tools() []host.Tool {
	all := p.reg.Toolset(p.tenant).Tools()
	if len(p.only) == 0 {
		return all
	}
	allowed := map[string]bool{}
	for _, m := range p.reg.Modules(p.tenant) {
		if slices.Contains(p.only, m.Name()) {
			for _, d := range m.Description().Tools {
				allowed[d.Name] = true
			}
		}
	}
	return slices.DeleteFunc(all, func(t host.Tool) bool { return !allowed[t.Spec().Name] })
}

// hostIDOf is the id of this host in the storage's per-host records.
func hostIDOf(id string) string {
	if id != "" {
		return id
	}
	name, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", name, os.Getpid())
}

// ServeHTTP serves the API.
//
// A path that is not clean ("..", ".", "//") is refused with 400: the
// router would answer it with a redirect to the clean path, which some
// clients follow by sending a POST's body again, elsewhere.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p != "" && path.Clean(p) != p && path.Clean(p)+"/" != p {
		writeError(w, http.StatusBadRequest, codeInvalid, "the path %q is not clean (no \"..\", \".\" or empty segments)", p)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Drain makes the server refuse new work (readyz answers 503, new
// messages and tasks 503), as the first step of a graceful shutdown;
// reads are still served. Close refuses the rest (approval decisions,
// event streams).
func (s *Server) Drain() {
	s.closing.Store(true)
	s.stopFiring()
}

// stopFiring stops the tenants' schedule runners (another host's take
// their leases over).
func (s *Server) stopFiring() {
	if s.stopSchedules != nil {
		s.stopSchedules()
	}
}

// Close shuts the server down: it refuses new work, ends the event
// streams, and has every run in flight stop at its next step boundary
// (see host.Host.Drain): a run whose pass in flight ends it completes, the
// others stop once that pass and its tool calls are recorded, and stay
// interrupted for the next host to resume from there. Runs still in a
// step when ctx ends are stopped as a crash would stop them, recording
// nothing more (their pass in flight restarts on resume). Then Close
// stops the plugins. It returns ctx.Err() when ctx ended first.
func (s *Server) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.doneOnce.Do(func() { close(s.done) })
	s.stopFiring()
	for _, t := range s.tenants {
		t.host.Drain()
	}
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, t := range s.tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.host.Close(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.tasks.Wait()
	// The event streams' own goroutines end with their hosts (a write to
	// a client that stopped reading, with its deadline).
	relays := make(chan struct{})
	go func() { s.relays.Wait(); close(relays) }()
	select {
	case <-relays:
	case <-ctx.Done():
	}
	if s.agreement != nil {
		// Withdrawn once this process writes nothing more.
		if err := s.agreement.Close(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
	}
	if s.stopBg != nil {
		s.stopBg()
	}
	s.bg.Wait()
	for _, w := range s.watchers {
		w.Close()
	}
	for _, t := range s.tenants {
		t.closeMCP()
	}
	if s.registry != nil {
		s.registry.Close(context.Background())
	}
	if s.rt != nil {
		s.rt.Close(context.Background())
	}
	if s.metrics != nil {
		s.metrics.shutdown(context.Background())
	}
	return errors.Join(errs...)
}

// serves reports whether the server serves tenant.
func (s *Server) serves(tenant string) bool { _, ok := s.tenants[tenant]; return ok }

// store returns the tenant's prefix of the server's storage.
func (t *tenant) store() storage.Storage { return t.storage }
