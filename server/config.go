package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/oci"
)

// Config is the service's configuration: the YAML file `agentic-host serve
// --config` reads (examples/serve/agentic.yaml is one; docs/operations.md
// explains the fields that matter to an operator), after the
// environment's and the flags' overrides (see [ApplyOverrides]). The zero
// value of every optional field is its default.
type Config struct {
	// Listen is the address the service listens on. Default:
	// "127.0.0.1:8080".
	Listen string `yaml:"listen"`
	// Storage is the storage URL (memory:, file:DIR, redis://…). Default:
	// "file:.agentic".
	Storage string `yaml:"storage"`
	// Model is the model endpoint.
	Model ModelConfig `yaml:"model"`
	// HostID names this host in the ledgers. Default: "<hostname>-<pid>".
	HostID string `yaml:"host_id"`
	// LeaseTTL is the sessions' lease time to live on a shared storage.
	// Default: 0, which means 15s.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// LedgerFeatures are the ledger features this host announces that it
	// reads (see host.Agreement): every host sharing the storage writes
	// an event that uses a feature only while all announce it. Default:
	// absent, every feature of this build; list fewer (or none, []) to
	// keep the hosts from writing the others, so that a rollback to a
	// build without them stays possible. (A pointer: absent and empty
	// differ, and stay apart through ApplyOverrides.)
	LedgerFeatures *[]ledger.Feature `yaml:"ledger_features"`
	// PluginsDir keeps each tenant's plugins, in PluginsDir/TENANT/
	// (uploaded through the API, or put there; hot-reloaded). Default: "",
	// no plugins.
	PluginsDir string `yaml:"plugins_dir"`
	// PluginCacheDir keeps compiled plugins on disk (plugins.Options.
	// CacheDir): a restart loads a plugin compiled before with no compiler
	// process. Default: "", a cache of the process's own; agentic-host
	// serve's default is $AGENTIC_WASM_CACHE, else the user cache
	// directory's agentic-host/wasm (none, with a warning, when it cannot
	// be written).
	PluginCacheDir string `yaml:"plugin_cache_dir"`
	// AutoResume resumes the runs that a host left interrupted, at start
	// and whenever a dead host's lease lapses. Default: true.
	AutoResume *bool `yaml:"auto_resume"`
	// ResumeMaxAttempts is how many times an interrupted run is resumed
	// before it is given up on (host.AutoResume.MaxAttempts): a host
	// that dies or stalls past its lease while resuming it counts one, so
	// that a run that kills its host every time cannot wedge the hosts.
	// Needs auto_resume. Default: 0, which means 3.
	ResumeMaxAttempts int `yaml:"resume_max_attempts"`
	// ShutdownGrace is how long, on SIGTERM, the runs in flight get to
	// reach their next step boundary (see [Server.Close]); those still in
	// a step then are stopped as a crash would stop them. Either way they
	// are left, resumable, for the next host. Default: 0, which means 10s.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// MaxRequestBytes bounds a request body. Default: 0, which means 1 MiB.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxPluginBytes bounds an uploaded module. Default: 0, which means
	// 64 MiB.
	MaxPluginBytes int64 `yaml:"max_plugin_bytes"`
	// MaxArchiveBytes bounds an archive posted to POST
	// /v1/sessions/import, both as sent (compressed) and its contents
	// uncompressed. Default: 0, which means 256 MiB.
	MaxArchiveBytes int64 `yaml:"max_archive_bytes"`
	// MaxPluginUploads bounds the module uploads (PUT /v1/plugins/{name})
	// read and loaded at once in the process, every tenant's (each tenant
	// uploads one at a time): another meanwhile is answered 429 with
	// Retry-After before its body is read. Default: 0, which means 2.
	MaxPluginUploads int `yaml:"max_plugin_uploads"`
	// MaxScheduleTextBytes bounds a schedule's text (each occurrence
	// appends it to the session's ledger): a longer one is refused, in
	// the configuration and by POST /v1/schedules (400). Default: 0,
	// which means 16 KiB.
	MaxScheduleTextBytes int `yaml:"max_schedule_text_bytes"`
	// MaxSchedules bounds a tenant's schedules, the configuration's and
	// those made through the API: POST /v1/schedules past it is refused
	// (409). Default: 0, which means 100.
	MaxSchedules int `yaml:"max_schedules"`
	// MaxImports bounds the imports (POST /v1/sessions/import) in
	// progress at once in the process, every tenant's: each spools its
	// archive to a temporary file (at most max_archive_bytes) and reads
	// it an event, or a blob, at a time. One past it is refused with 503
	// and Retry-After. Default: 0, which means 2.
	MaxImports int `yaml:"max_imports"`
	// BlobThreshold is the size in bytes above which a message's
	// attachments and a tool's output are kept by reference in the
	// storage's blob store (host.Options.BlobThreshold), once however
	// often they are sent, instead of inside the ledger's events; the
	// tenants' quotas (blob_quota_bytes, max_blob_bytes) bound them.
	// Default: 0, which means 64 KiB; -1 keeps every byte in the ledger
	// (and the quotas bound nothing).
	BlobThreshold int64 `yaml:"blob_threshold"`
	// MaxStreams bounds the open event streams of the whole process, every
	// tenant's (429 past it). Default: 0, which means 4096, or three
	// quarters of the process's file descriptor limit when that is lower.
	MaxStreams int `yaml:"max_streams"`
	// MaxRuns bounds the runs in flight in the whole process, every
	// tenant's: a message that would start a run past it is refused with
	// 503 and Retry-After (a message to a session whose run is in flight
	// joins that run, and passes), before the runs' connections and files
	// use up the process's file descriptors. Default: 0, which means 4096,
	// or a quarter of the process's file descriptor limit when that is
	// lower.
	MaxRuns int `yaml:"max_runs"`
	// QueueRuns lets that many new runs past MaxRuns wait for a place
	// instead of being refused: fair across tenants (each place that frees
	// goes to the next tenant in turn that has a run waiting), first come
	// first served within a tenant, each wait bounded by QueueTimeout;
	// past QueueRuns waiting, or past the timeout, the request is refused
	// (503, as without a queue). A run waiting here holds its tenant's
	// places (rate_limit.concurrent_runs), not the process's. Default: 0,
	// no queue.
	QueueRuns int `yaml:"queue_runs"`
	// QueueTimeout bounds a wait in the QueueRuns queue. Default: 0,
	// which means 30s.
	QueueTimeout Duration `yaml:"queue_timeout"`
	// StreamMaxAge closes a session's or the feed's event stream this
	// long after it opened; its client reconnects with Last-Event-ID and
	// loses nothing (the UI message streams end with their message).
	// Default: 0, which means 1h.
	StreamMaxAge Duration `yaml:"stream_max_age"`
	// BodyTimeout bounds the reading of a request's body (a message, a
	// decision, a module upload): a client that sends it slower is
	// answered 408 and its connection closed. Default: 0, which means 60s.
	BodyTimeout Duration `yaml:"body_timeout"`
	// IdleTimeout closes a kept-alive connection that no request follows
	// for this long (agentic-host serve's http.Server; a Server mounted
	// elsewhere is its host's to bound). Default: 0, which means 2m.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// Heartbeat paces the comments that keep an idle event stream open.
	// Default: 0, which means 15s.
	Heartbeat Duration `yaml:"heartbeat"`
	// StreamWriteTimeout bounds one write to an event stream's client: a
	// client that stops reading is dropped once a write waits this long
	// (it reconnects with Last-Event-ID and loses nothing); runs never
	// wait for it. Default: 0, which means 30s.
	StreamWriteTimeout Duration `yaml:"stream_write_timeout"`
	// MetricsKey, when set, is the bearer key /metrics asks for (the
	// metrics name the tenants). Default: "", /metrics is open when Listen
	// is a loopback address, and refused (403, naming this key) otherwise.
	MetricsKey string `yaml:"metrics_key"`
	// TraceURL links a run's OpenTelemetry trace from the console: an
	// http(s) URL with {trace_id} where the trace's id goes, e.g.
	// https://tempo.example/trace/{trace_id}. Default: "", the console
	// shows the id without a link.
	TraceURL string `yaml:"trace_url"`
	// OCI is how the tenants' plugins of OCI registries are pulled
	// (TenantConfig.Plugins).
	OCI OCIConfig `yaml:"oci"`
	// Tenants are the tenants the service serves, by name.
	Tenants map[string]TenantConfig `yaml:"tenants"`
}

// OCIConfig is how plugins are pulled from OCI registries.
type OCIConfig struct {
	// CacheDir keeps the manifests and modules pulled, by digest, so that
	// a restart needs no registry. Default: "", PluginsDir/.oci, else
	// PluginCacheDir/oci, else no cache.
	CacheDir string `yaml:"cache_dir"`
	// Insecure are registries (host[:port]) reached over plain HTTP;
	// loopback ones always are. Default: none, HTTPS.
	Insecure []string `yaml:"insecure"`
}

// ModelConfig is the model endpoint: any OpenAI-compatible server.
type ModelConfig struct {
	// BaseURL is the endpoint. Default: OpenRouter's.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the endpoint's key.
	// Default: "OPENROUTER_API_KEY".
	APIKeyEnv string `yaml:"api_key_env"`
	// Offline runs the built-in fake model instead (tests, demos).
	// Default: false.
	Offline bool `yaml:"offline"`
}

// TenantConfig is one tenant: its keys, agents, models, sandbox and
// limits.
type TenantConfig struct {
	// Keys are the tenant's API keys, by their SHA-256 ("sha256:HEX"),
	// each with an expiry if it has one (see [KeyConfig]). More are kept
	// in the storage by `agentic-host keys create`. Default: none.
	Keys []KeyConfig `yaml:"keys"`
	// Agents are the tenant's agents by name; a request names one, or
	// gets "default". Default: one "default" agent on the first allowed
	// model.
	Agents map[string]AgentConfig `yaml:"agents"`
	// Models is the allow-list of model ids the tenant's agents may use.
	// Default: none, any.
	Models []string `yaml:"models"`
	// BudgetUSDPerDay bounds the tenant's billed cost per UTC day: a run
	// does not start past it, and a run that crosses it stops before its
	// next model pass. Default: 0, no budget.
	BudgetUSDPerDay float64 `yaml:"budget_usd_per_day"`
	// PluginFuelPerDay bounds the fuel the tenant's plugins use per UTC
	// day (their CPU; docs/plugins.md, "Fuel"): past it, a plugin's tool
	// call is refused with an error the model reads. Default: 0, no
	// budget.
	PluginFuelPerDay int64 `yaml:"plugin_fuel_per_day"`
	// PluginFuelRefusesRuns makes a run not start while the tenant is past
	// PluginFuelPerDay (402, as past budget_usd_per_day). Default: false,
	// runs start and only plugin calls are refused.
	PluginFuelRefusesRuns bool `yaml:"plugin_fuel_refuses_runs"`
	// BudgetAsk makes a run that reaches budget_usd_per_day or
	// plugin_fuel_per_day park for a person's approval instead of failing
	// (a request of kind "budget_exceeded" or "plugin_budget_exceeded", in
	// the inbox): approved, the run may spend RaiseUSD more, or its plugins
	// use RaiseFuel more; denied or expired, it ends failed. Default:
	// none, a run past a budget fails.
	BudgetAsk *BudgetAskConfig `yaml:"budget_ask"`
	// BlobQuotaBytes bounds the bytes of the tenant's blobs (the
	// attachments and large tool outputs kept by reference, see
	// blob_threshold): a message whose attachments would pass it is
	// refused (413, blob_quota_exceeded), nothing appended. Default: 0, no
	// quota.
	BlobQuotaBytes int64 `yaml:"blob_quota_bytes"`
	// MaxBlobBytes bounds one attachment kept by reference: a message with
	// a larger one is refused (413, blob_quota_exceeded). A message's body
	// is bounded by max_request_bytes first (base64 makes an attachment a
	// third larger). Default: 0, no bound but max_request_bytes.
	MaxBlobBytes int64 `yaml:"max_blob_bytes"`
	// EvalBudgetUSDPerDay bounds what the tenant's evaluations (POST
	// /v1/eval) spend per UTC day, over every host, apart from its runs:
	// an evaluation is refused past it (402), and one that crosses it
	// stops at its next model call. Default: 0, evaluations spend from
	// budget_usd_per_day as runs do (and are bounded by nothing when that
	// is not set either).
	EvalBudgetUSDPerDay float64 `yaml:"eval_budget_usd_per_day"`
	// Delegation bounds the child runs the tenant's agents start by
	// delegating (an agent's delegate_to; see [DelegationConfig]).
	Delegation DelegationConfig `yaml:"delegation"`
	// RateLimit bounds the tenant's requests and runs.
	RateLimit RateLimitConfig `yaml:"rate_limit"`
	// Sandbox is what the tenant's plugins may do.
	Sandbox SandboxConfig `yaml:"sandbox"`
	// CompactionLimit compacts one of the tenant's sessions when a prompt
	// reaches this fraction of the model's context window. Default: 0,
	// which means 0.8.
	CompactionLimit float64 `yaml:"compaction_limit"`
	// Plugins are modules the tenant serves from OCI registries, each
	// pinned by digest: "oci://REGISTRY/REPOSITORY@sha256:HEX" (a tag
	// alone is a configuration error). They are pulled at start, verified
	// against their digests, bounded by the tenant's module size, cached
	// (OCI.CacheDir) and loaded as the tenant's other plugins are — its
	// sandbox, grants and trusted_keys apply (a signature is a layer of
	// the manifest). One that cannot be pulled or loaded is refused,
	// listed and audited; the others serve. A module is named by its
	// manifest's annotation org.agentichost.plugin.name, else by the
	// repository's last path element. Default: none.
	Plugins []string `yaml:"plugins"`
	// PluginConfig is the configuration of the tenant's plugins, by
	// module name (the file's name without .wasm): what each reads with
	// pdk.Config, e.g. {publish_post: {endpoint: https://…}}. It is
	// read when a module loads. Default: none.
	PluginConfig map[string]map[string]string `yaml:"plugin_config"`
	// MCPServers are MCP servers whose tools the tenant's agents take
	// (see [MCPServerConfig]). Default: none.
	MCPServers []MCPServerConfig `yaml:"mcp_servers"`
	// Webhooks tell other services of the tenant's runs, approvals and
	// budgets (see [WebhooksConfig]). Default: nil, none.
	Webhooks *WebhooksConfig `yaml:"webhooks"`
	// Schedules send messages into the tenant's sessions at the
	// occurrences of cron expressions (see [ScheduleConfig]); POST
	// /v1/schedules makes more, kept in the storage. Default: none.
	Schedules []ScheduleConfig `yaml:"schedules"`
	// Retention removes the tenant's closed sessions past its limits
	// (see [RetentionConfig]). Default: nil, sessions are kept forever.
	Retention *RetentionConfig `yaml:"retention"`
}

// DelegationConfig bounds the child runs a tenant's agents start through
// their delegate tools (host.DelegateLimits). A delegate call past a bound
// is not made: its result is an error the calling model reads, naming
// the setting. Each child run is admitted as a message of the API is
// (budget, max_runs, rate_limit.concurrent_runs and requests_per_second).
type DelegationConfig struct {
	// MaxDepth bounds the nesting: a child run of depth MaxDepth (the
	// top run's children are of depth 1) may not delegate. Default: 0,
	// which means 4; -1, none.
	MaxDepth int `yaml:"max_depth"`
	// MaxPerRun bounds the delegate calls one run makes. Default: 0,
	// which means 16; -1, none.
	MaxPerRun int `yaml:"max_per_run"`
	// MaxPerMessage bounds the child runs of a whole tree: a top run
	// (the run that answers a message) and every run under it. Default:
	// 0, which means 64; -1, none.
	MaxPerMessage int `yaml:"max_per_message"`
}

// RetentionConfig is how long a tenant's closed sessions are kept, and
// what happens to them then (package retention). Every host sweeps its
// tenants every Every; sweeps on several hosts are safe together. A
// session overrides it with PUT /v1/sessions/{id}/retention.
type RetentionConfig struct {
	// KeepDays keeps a closed session this many days after its last
	// event. Default: 0, no limit by age.
	KeepDays int `yaml:"keep_days"`
	// KeepLast keeps the tenant's most recent this many closed sessions.
	// Default: 0, no limit by count.
	KeepLast int `yaml:"keep_last"`
	// Action is archive (write the session to ArchiveDir/TENANT/ID.tar.gz,
	// then delete it) or delete. Default: archive.
	Action string `yaml:"action"`
	// ArchiveDir receives the archives, in a directory per tenant.
	// Required with the archive action.
	ArchiveDir string `yaml:"archive_dir"`
	// Every is how often each host sweeps. Default: 0, which means 1h.
	Every Duration `yaml:"every"`
}

// DefaultRetentionEvery is the default of RetentionConfig.Every.
const DefaultRetentionEvery = time.Hour

// WebhooksConfig is where a tenant's webhooks go: signed POSTs of the
// events of its sessions (run.ended, approval.requested, approval.decided,
// budget.exceeded), from a durable outbox (package webhook). The requests
// go through the tenant's sandbox: each URL's host must be among
// sandbox.allowed_hosts, and a private address is refused unless
// sandbox.allow_private_network.
type WebhooksConfig struct {
	// Endpoints receive the deliveries. Required.
	Endpoints []WebhookEndpointConfig `yaml:"endpoints"`
	// The signing secret (at least 16 bytes), from exactly one of Secret,
	// SecretEnv (an environment variable) and SecretFile (a file's
	// content, trimmed). Required.
	Secret     string `yaml:"secret"`
	SecretEnv  string `yaml:"secret_env"`
	SecretFile string `yaml:"secret_file"`
	// RetryFor is how long a delivery is tried before it is given up.
	// Default: 0, which means 24h.
	RetryFor Duration `yaml:"retry_for"`

	secret []byte // once read
}

// WebhookEndpointConfig is one URL that receives deliveries.
type WebhookEndpointConfig struct {
	URL string `yaml:"url"`
	// Events are the types it receives. Default: none, every type.
	Events []string `yaml:"events"`
}

// KeyConfig is an API key of a tenant's, in the configuration. In YAML it
// is its hash alone ("sha256:HEX", as `agentic-host keys hash KEY` prints
// it), or a mapping {hash: sha256:HEX, expires: 2026-12-31T00:00:00Z (or
// a date, 2026-12-31: its midnight UTC), user: alice}.
type KeyConfig struct {
	// Hash is "sha256:HEX", the SHA-256 of the key. Required.
	Hash string `yaml:"hash"`
	// Expires is when the key expires: from then on it is refused (401),
	// and the event streams opened with it close at their next heartbeat.
	// Default: zero, never.
	Expires time.Time `yaml:"expires"`
	// User binds the key to an end user: its requests are that user's,
	// bound by rate_limit.per_user as if they named the user in
	// X-Agentic-User (a header naming another user answers 403).
	// Default: "", a key of the whole tenant.
	User string `yaml:"user"`
}

// UnmarshalYAML reads a key's hash, or a mapping of its hash, expiry and
// user.
// A bad value is a *yaml.TypeError, so that the decoder goes on and
// reports the file's other problems with it.
func (k *KeyConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*k = KeyConfig{Hash: n.Value}
		return nil
	}
	var raw struct {
		Hash    string `yaml:"hash"`
		Expires string `yaml:"expires"`
		User    string `yaml:"user"`
	}
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a key's hash (sha256:HEX) or {hash, expires}", n.Line)}}
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*k = KeyConfig{Hash: raw.Hash, User: raw.User}
	if raw.Expires == "" {
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if at, err := time.Parse(layout, raw.Expires); err == nil {
			k.Expires = at.UTC()
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expires %q: want a time (2026-12-31T00:00:00Z) or a date (2026-12-31)", n.Line, raw.Expires)}}
}

// MarshalYAML writes the hash alone when the key never expires and names
// no user.
func (k KeyConfig) MarshalYAML() (any, error) {
	if k.Expires.IsZero() && k.User == "" {
		return k.Hash, nil
	}
	m := map[string]string{"hash": k.Hash}
	if !k.Expires.IsZero() {
		m["expires"] = k.Expires.UTC().Format(time.RFC3339Nano)
	}
	if k.User != "" {
		m["user"] = k.User
	}
	return m, nil
}

// BudgetAskConfig is what an approval of a run past its tenant's budget
// lets it do (TenantConfig.BudgetAsk).
type BudgetAskConfig struct {
	// RaiseUSD is what one approval lets the run spend past
	// budget_usd_per_day. Default: a tenth of the budget.
	RaiseUSD float64 `yaml:"raise_usd"`
	// RaiseFuel is the fuel one approval lets the run's plugins use past
	// plugin_fuel_per_day. Default: a tenth of the budget.
	RaiseFuel int64 `yaml:"raise_fuel"`
}

// AgentConfig is one of a tenant's agents.
type AgentConfig struct {
	// Model is the model id. Required unless the tenant allows exactly
	// one model, or Models names it.
	Model string `yaml:"model"`
	// Models names the agent's models in order: the first is its model
	// (Model may then be left out, or be the same), the others its
	// fallbacks (host.Agent.Fallback): a pass whose model is not served
	// or whose transient failures outlast the retry policy goes to the
	// next. Each must be among the tenant's models. Default: none, Model
	// alone.
	Models []string `yaml:"models"`
	// ExtraBody are extra top-level fields of each of the agent's model
	// requests (host.Agent.ExtraBody): OpenRouter's "models" (its own
	// fallback inside one request, each among the tenant's models),
	// "provider", "reasoning", "transforms". Not the fields the host
	// writes (model, messages, tools, stream, stream_options, max_tokens,
	// max_completion_tokens), nor "route" when the tenant names its models
	// (it lets the endpoint pick a model outside them). Default: none.
	ExtraBody map[string]any `yaml:"extra_body"`
	// Retry bounds and paces the retries of the agent's model passes
	// (host.Agent.Retry). Default: nil, the host's (6 attempts, 500ms
	// doubling to 30s, equal jitter, Retry-After honoured up to 2m).
	Retry *RetryConfig `yaml:"retry"`
	// System is the system prompt. Default: none.
	System string `yaml:"system"`
	// Description says what the agent does, for the clients that find it
	// through its A2A agent card. Default: "", a sentence naming it.
	Description string `yaml:"description"`
	// MaxSteps bounds the passes of a run. Default: 0, which means 16.
	MaxSteps int `yaml:"max_steps"`
	// MaxTokens bounds each pass's output. Default: 0, the provider's.
	MaxTokens int `yaml:"max_tokens"`
	// CompactionLimit compacts a session the agent runs when a prompt
	// reaches this fraction of the model's context window, in place of
	// the tenant's compaction_limit (host.Agent.Compaction). Default: 0,
	// the tenant's.
	CompactionLimit float64 `yaml:"compaction_limit"`
	// Plugins names the plugins whose tools the agent offers. Default:
	// none, every plugin of the tenant.
	Plugins []string `yaml:"plugins"`
	// Smooth paces the text the agent's runs stream to viewers (the SSE
	// progress and the UI message stream), a chunk at a time (see
	// host.SmoothOptions); the ledger keeps the model's own deltas.
	// Default: nil, text goes out as the model streams it.
	Smooth *SmoothConfig `yaml:"smooth"`
	// MCP names the tenant's MCP servers whose tools the agent offers.
	// Default: none named, every one.
	MCP []string `yaml:"mcp"`
	// Policy decides every tool call with a plugin's policy:
	// "PLUGIN[:NAME]". Default: "", by effect (external calls wait for a
	// person).
	Policy string `yaml:"policy"`
	// Approve names the tools whose calls run without a person. Default:
	// none.
	Approve []string `yaml:"approve"`
	// Timeouts are the agent's named timeouts.
	Timeouts TimeoutsConfig `yaml:"timeouts"`
	// OnInterrupted is what becomes of a run of the agent that a host
	// left interrupted (it died, or its shutdown grace ran out), when a
	// host takes it over (host.Agent.OnInterrupted): "resume" goes on
	// where it stopped, "restart" runs its messages again from scratch,
	// "fail" ends it failed, and "leave" keeps it interrupted until the
	// next message (which closes it as interrupted and is answered by a
	// run of its own, seeing the transcript) or POST
	// /v1/sessions/{id}/resume. Default: "", which means "resume".
	OnInterrupted string `yaml:"on_interrupted"`
	// Overlap is what a message naming the agent does while the
	// session's run works (host.Agent.Overlap): "queue" joins that run,
	// "reject" is refused with 409 naming the run, and nothing is
	// appended; "interrupt" cancels that run (what it did kept) and is
	// answered by a run of its own; "rollback" does so too and drops the
	// cancelled turn from what the model sees next. A message's own
	// "overlap" field overrides it. Default: "", which means "queue".
	Overlap string `yaml:"overlap"`
	// DelegateTo names other agents of the tenant that the agent may call
	// as tools (sub-agents, host.NewDelegateTool): a tool named after each,
	// taking {"task": "..."}, runs that agent in a child session of its
	// own and answers with its final text. The agents a tenant's agents
	// delegate to form no cycle. Default: none.
	DelegateTo []string `yaml:"delegate_to"`
}

// SmoothConfig paces an agent's streamed text (host.SmoothOptions).
type SmoothConfig struct {
	// Delay is the pause between two chunks. Default: 0, which means
	// 15ms; negative: none.
	Delay Duration `yaml:"delay"`
	// Chunking is word, line, or a regular expression whose first match
	// ends a chunk (one kana or kanji, or a word:
	// '[\p{Han}\p{Hiragana}\p{Katakana}]|\S+\s+'). Default: word.
	Chunking string `yaml:"chunking"`
}

// options is c as the host takes it.
func (c SmoothConfig) options() host.SmoothOptions {
	return host.SmoothOptions{Delay: time.Duration(c.Delay), Chunking: c.Chunking}
}

// RetryConfig is a retry policy (model.RetryPolicy).
type RetryConfig struct {
	// Attempts bounds the attempts of one model pass on one model, the
	// first included; 1 disables retries. Default: 0, which means 6.
	Attempts int `yaml:"attempts"`
	// Base is the wait after the first failure; it doubles after each.
	// Default: 0, which means 500ms.
	Base Duration `yaml:"base"`
	// Cap caps the computed wait. Default: 0, which means 30s.
	Cap Duration `yaml:"cap"`
	// Jitter spreads the computed waits: "equal" (a random point in the
	// upper half), "full" (anywhere up to the wait) or "none". Default:
	// "", which means equal.
	Jitter string `yaml:"jitter"`
	// MaxElapsed bounds the time a pass spends retrying one model: a
	// retry whose wait would end past it is not made (the pass falls
	// back, or fails). Default: 0, no bound but Attempts.
	MaxElapsed Duration `yaml:"max_elapsed"`
	// MaxRetryAfter caps a wait the server asks for with Retry-After,
	// which otherwise wins over Base, Cap and Jitter. Default: 0, which
	// means 2m.
	MaxRetryAfter Duration `yaml:"max_retry_after"`
	// ByCause overrides the policy for the failures of one cause:
	// rate_limit (429), server (5xx, 408, 409, 425, an error chunk
	// mid-stream), network, stream (stalled, cut short, malformed),
	// timeout, context_overflow, unavailable, other. An entry's zero
	// fields are the policy's; it has no by_cause of its own. Default:
	// none.
	ByCause map[string]RetryConfig `yaml:"by_cause"`
}

// retryProblem words a model.RetryPolicy's problem in the configuration's
// names.
func retryProblem(err error) string {
	return strings.NewReplacer(`ByCause["`, "by_cause.", `"].`, ": ", "ByCause", "by_cause", "MaxAttempts", "attempts", "BaseDelay", "base",
		"MaxDelay", "cap", "MaxRetryAfter", "max_retry_after", "MaxElapsed", "max_elapsed", "Jitter", "jitter").Replace(err.Error())
}

// policy is the model.RetryPolicy c describes.
func (c RetryConfig) policy() model.RetryPolicy {
	p := model.RetryPolicy{MaxAttempts: c.Attempts, BaseDelay: time.Duration(c.Base), MaxDelay: time.Duration(c.Cap),
		Jitter: model.Jitter(c.Jitter), MaxElapsed: time.Duration(c.MaxElapsed), MaxRetryAfter: time.Duration(c.MaxRetryAfter)}
	if len(c.ByCause) > 0 {
		p.ByCause = map[model.Cause]model.RetryPolicy{}
		for cause, q := range c.ByCause {
			p.ByCause[model.Cause(cause)] = q.policy()
		}
	}
	return p
}

// TimeoutsConfig are an agent's timeouts (see host.AgentTimeouts).
type TimeoutsConfig struct {
	// Total bounds a run's working time (approvals' waits aside).
	// Default: 0, none.
	Total Duration `yaml:"total"`
	// Step bounds one model pass with its retries and tool calls.
	// Default: 0, none.
	Step Duration `yaml:"step"`
	// FirstChunk bounds the wait for a reply's first fragment. Default:
	// 0, none.
	FirstChunk Duration `yaml:"first_chunk"`
	// Chunk bounds the silence between two fragments. Default: 0, none.
	Chunk Duration `yaml:"chunk"`
	// Tool bounds a tool call whose tool sets no timeout. Default: 0, the
	// host's (60s).
	Tool Duration `yaml:"tool"`
}

// RateLimitConfig bounds a tenant's use.
type RateLimitConfig struct {
	// RequestsPerSecond bounds the tenant's API requests (token bucket).
	// Default: 0, no bound.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is the bucket's size. Default: 0, which means twice
	// RequestsPerSecond (at least 1).
	Burst int `yaml:"burst"`
	// ConcurrentRuns bounds the tenant's runs in flight in this host.
	// Default: 0, no bound.
	ConcurrentRuns int `yaml:"concurrent_runs"`
	// QueueRuns lets that many new runs wait, first come first served,
	// for a place under ConcurrentRuns instead of being refused: a
	// request past the bound waits (up to QueueTimeout) and its run
	// starts as soon as one of the tenant's runs ends; past QueueRuns
	// waiting, it is refused (429) as without a queue. The queue's length
	// and waits are in /metrics (agentic_admission_queue_length,
	// agentic_admission_queue_wait_seconds). Needs ConcurrentRuns.
	// Default: 0, no queue.
	QueueRuns int `yaml:"queue_runs"`
	// QueueRequests lets that many requests past RequestsPerSecond wait
	// for their token instead of being refused: each waits its turn
	// (tokens are taken in the order asked) unless its turn would come
	// later than QueueTimeout, or QueueRequests wait already (429 then, as
	// without a queue). Needs RequestsPerSecond. Default: 0, no queue.
	QueueRequests int `yaml:"queue_requests"`
	// QueueTimeout bounds a wait in those queues; past it the request is
	// refused (429, Retry-After). Default: 0, which means 30s.
	QueueTimeout Duration `yaml:"queue_timeout"`
	// PerUser bounds each end user a request names (the X-Agentic-User
	// header) beside the tenant's bounds. Default: nil, none.
	PerUser *PerUserConfig `yaml:"per_user"`
	// ConcurrentImports bounds the tenant's imports in progress at once
	// in this host (429 and Retry-After past it). Default: 0, which means
	// 1.
	ConcurrentImports int `yaml:"concurrent_imports"`
	// Streams bounds the tenant's open event streams in this host (429
	// past it). Default: 0, which means 256.
	Streams int `yaml:"streams"`
	// StreamsPerKey bounds the open event streams of one of the tenant's
	// API keys in this host. Default: 0, which means 32.
	StreamsPerKey int `yaml:"streams_per_key"`
}

// SandboxConfig is what a tenant's plugins may do (see plugins.Limits);
// the zero value is the deny-by-default sandbox.
type SandboxConfig struct {
	// AllowedHosts are the hosts the plugins' HTTP may reach
	// ("example.com", "example.com:8443", "*.example.com"). Default: none,
	// HTTP denied.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowPrivateNetwork lets HTTP reach loopback and private addresses.
	// Default: false.
	AllowPrivateNetwork bool `yaml:"allow_private_network"`
	// KV enables the tenant's key-value store for its plugins. Default:
	// false.
	KV bool `yaml:"kv"`
	// MemoryPages caps each instance's memory, in 64 KiB pages (at most
	// 65536). Default: 0, which means 512 (32 MiB).
	MemoryPages uint32 `yaml:"memory_pages"`
	// CallTimeout bounds one call of a plugin. Default: 0, which means 5s.
	CallTimeout Duration `yaml:"call_timeout"`
	// Fuel bounds the work of one call of a plugin, about an instruction a
	// unit (plugins.Limits.Fuel): a call that spends it fails out_of_fuel.
	// Default: 0, which means 10,000,000,000.
	Fuel int64 `yaml:"fuel"`
	// MaxOutputBytes bounds one call's output. Default: 0, which means
	// 1 MiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// Instances bounds a module's live instances (its calls at once).
	// Default: 0, which means 4.
	Instances int `yaml:"instances"`
	// WarmInstances is how many idle instances each plugin keeps ready,
	// made in the background after its load and after a failure threw one
	// away, so that a burst of calls pays no instantiation
	// (plugins.Limits.WarmInstances); at most instances. Default: 0, made
	// as calls need them.
	WarmInstances int `yaml:"warm_instances"`
	// CompileTimeout bounds compiling a module not compiled before
	// (plugins.Limits.CompileTimeout). Default: 0, which means 10s.
	CompileTimeout Duration `yaml:"compile_timeout"`
	// Grants are what each plugin may do of the sandbox above, by module
	// name: once a tenant names any, a plugin gets only its own grant
	// (one not named gets no HTTP and no key-value store), each within
	// the tenant's allowed_hosts, allow_private_network and kv. Default:
	// none (or an empty map), every plugin gets the sandbox whole.
	Grants map[string]GrantConfig `yaml:"grants"`
	// Secrets are credentials the host adds to one plugin's HTTP requests
	// to one host, which the plugin never reads (plugins.EgressSecret).
	// Default: none.
	Secrets []SecretConfig `yaml:"secrets"`
	// Quarantine is when a plugin that fails too often is quarantined
	// (plugins.QuarantinePolicy).
	Quarantine QuarantineConfig `yaml:"quarantine"`
	// TrustedKeys are minisign public keys (each the second line of a
	// minisign.pub file, "RWQ…") that sign the tenant's plugins: once
	// it names any (here or in TrustedKeyFiles), a plugin loads only with
	// a signature by one of them (NAME.wasm.minisig beside NAME.wasm; an
	// upload's "signature" part), checked before it compiles. Default:
	// none, no signature required.
	TrustedKeys []string `yaml:"trusted_keys"`
	// TrustedKeyFiles are minisign.pub files whose keys are trusted as
	// TrustedKeys are, read at start. Default: none.
	TrustedKeyFiles []string `yaml:"trusted_key_files"`

	keyring *plugins.Keyring // TrustedKeys and TrustedKeyFiles, once read
}

// QuarantineConfig is when a tenant's plugin that fails as a module —
// traps, timeouts, out of memory or fuel, exits — is quarantined: its
// calls are refused until a person releases it (POST
// /v1/plugins/{name}/release) or a new version replaces it.
type QuarantineConfig struct {
	// Failures within Window quarantine a plugin. Default: 0, which
	// means 5; -1 turns quarantine off.
	Failures int `yaml:"failures"`
	// Window is the span the failures fall within. Default: 0, which
	// means 10m.
	Window Duration `yaml:"window"`
}

// DefaultQuarantineFailures is QuarantineConfig.Failures's default.
const DefaultQuarantineFailures = 5

// policy is c as the registry takes it.
func (c QuarantineConfig) policy() plugins.QuarantinePolicy {
	switch {
	case c.Failures < 0:
		return plugins.QuarantinePolicy{}
	case c.Failures == 0:
		c.Failures = DefaultQuarantineFailures
	}
	return plugins.QuarantinePolicy{Failures: c.Failures, Window: time.Duration(c.Window)}
}

// SecretConfig is a credential bound to a plugin and a host. Its value
// comes from exactly one of Value, ValueEnv (an environment variable of
// the serve process) and ValueFile (a file's content, trimmed).
type SecretConfig struct {
	// Plugin is the module it is for; Host the host it is sent to, among
	// the plugin's allowed hosts.
	Plugin string `yaml:"plugin"`
	Host   string `yaml:"host"`
	// Header is the request header it goes in. Default: Authorization.
	Header string `yaml:"header"`
	// Scheme is "bearer" (Bearer VALUE), "basic" (Basic with User and
	// VALUE) or "" (VALUE as it is).
	Scheme string `yaml:"scheme"`
	User   string `yaml:"user"`
	// The value's source.
	Value     string `yaml:"value"`
	ValueEnv  string `yaml:"value_env"`
	ValueFile string `yaml:"value_file"`

	resolved string // the header's value, once read
}

// resolve reads the secret's value and makes its header's value.
func (s *SecretConfig) resolve(getenv func(string) string) error {
	sources := 0
	for _, v := range []string{s.Value, s.ValueEnv, s.ValueFile} {
		if v != "" {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("want exactly one of value, value_env and value_file")
	}
	v := s.Value
	switch {
	case s.ValueEnv != "":
		if v = getenv(s.ValueEnv); v == "" {
			return fmt.Errorf("value_env %s is not set", s.ValueEnv)
		}
	case s.ValueFile != "":
		b, err := os.ReadFile(s.ValueFile)
		if err != nil {
			return fmt.Errorf("value_file: %v", err)
		}
		if v = strings.TrimSpace(string(b)); v == "" {
			return fmt.Errorf("value_file %s is empty", s.ValueFile)
		}
	}
	switch s.Scheme {
	case "":
	case "bearer":
		v = "Bearer " + v
	case "basic":
		v = "Basic " + base64.StdEncoding.EncodeToString([]byte(s.User+":"+v))
	default:
		return fmt.Errorf("scheme %q: want bearer, basic or none", s.Scheme)
	}
	if s.Header == "" {
		s.Header = "Authorization"
	}
	s.resolved = v
	return nil
}

// GrantConfig is what one plugin may do of its tenant's sandbox
// (plugins.Grant).
type GrantConfig struct {
	AllowedHosts        []string `yaml:"allowed_hosts"`
	AllowPrivateNetwork bool     `yaml:"allow_private_network"`
	KV                  bool     `yaml:"kv"`
}

// grant returns what the tenant's sandbox lets module do, with its
// secrets.
func (c SandboxConfig) grant(module string) plugins.Grant {
	g := plugins.GrantOf(c.limits())
	if len(c.Grants) > 0 {
		gc := c.Grants[module]
		g = plugins.Grant{AllowedHosts: gc.AllowedHosts, AllowPrivateNetwork: gc.AllowPrivateNetwork, KV: gc.KV}
	}
	for _, s := range c.Secrets {
		if s.Plugin == module {
			g.Secrets = append(g.Secrets, plugins.EgressSecret{Host: s.Host, Header: s.Header, Value: s.resolved})
		}
	}
	return g
}

// Duration is a time.Duration written as "10s", "2m30s".
type Duration time.Duration

// UnmarshalYAML reads "10s", or a number of seconds. A bad value is a
// *yaml.TypeError, so that the decoder goes on and reports the file's
// other problems with it.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as 10s", n.Line)}}
	}
	if v, err := time.ParseDuration(n.Value); err == nil {
		*d = Duration(v)
		return nil
	}
	if secs, err := strconv.ParseFloat(n.Value, 64); err == nil {
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (want e.g. 10s, 2m)", n.Line, n.Value)}}
}

// MarshalYAML writes the duration as "10s".
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// The defaults of Config.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultStorage         = "file:.agentic"
	DefaultShutdownGrace   = 10 * time.Second
	DefaultMaxRequestBytes = 1 << 20
	DefaultMaxPluginBytes  = 64 << 20
	DefaultMaxArchiveBytes = 256 << 20
	DefaultMaxImports      = 2
	DefaultHeartbeat       = 15 * time.Second
	DefaultStreamWrite     = 30 * time.Second
	DefaultBodyTimeout     = 60 * time.Second
	DefaultIdleTimeout     = 2 * time.Minute
	DefaultStreamMaxAge    = time.Hour
	DefaultMaxStreams      = 4096
	DefaultMaxRuns         = 4096
	// DefaultMaxPluginUploads is Config.MaxPluginUploads when it is 0.
	DefaultMaxPluginUploads = 2
	// DefaultMaxScheduleTextBytes and DefaultMaxSchedules are
	// Config.MaxScheduleTextBytes and Config.MaxSchedules when 0.
	DefaultMaxScheduleTextBytes = 16 << 10
	DefaultMaxSchedules         = 100
	// The defaults of RateLimitConfig's stream bounds.
	DefaultTenantStreams = 256
	DefaultKeyStreams    = 32
)

// tenantName is what a tenant may be called: it prefixes the tenant's
// session ids in the storage.
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// LoadConfig reads the YAML configuration at path. Unknown fields are
// errors that name their line, as are values of the wrong type; every such
// problem of the file is reported at once.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("server: config: %w", err)
	}
	cfg, err := decodeStrict(b)
	if err != nil {
		return Config{}, fmt.Errorf("server: config %s: %w", path, err)
	}
	return cfg, nil
}

// decodeStrict decodes a YAML document into a Config: an unknown field is
// an error that names its line.
func decodeStrict(b []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	return cfg, nil
}

// ApplyOverrides sets fields of cfg from the environment and from flags, in
// that order (a flag wins). An override is PATH=VALUE, PATH the fields'
// YAML names joined by dots (tenants.acme.budget_usd_per_day=5). VALUE is
// read as a YAML scalar (5 is a number, true a bool), or as a flow
// sequence or mapping ([a, b], {k: v}); anything else is text as it is
// written ("Note: be brief" stays that text). From the environment, a
// variable AGENTIC_CONFIG_PATH sets PATH, its dots written "__" and its
// names in any case (AGENTIC_CONFIG_TENANTS__ACME__BUDGET_USD_PER_DAY=5);
// AGENTIC_LISTEN and AGENTIC_STORAGE set listen and storage. An override
// of a field that does not exist, or whose value does not fit the field,
// is an error naming the override; every bad override is reported at once,
// and cfg is then returned unchanged.
func ApplyOverrides(cfg Config, environ []string, flags []string) (Config, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return cfg, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return cfg, err
	}
	var errs []error
	set := func(path, value, from string) {
		if err := setOverride(&root, strings.Split(path, "."), value); err != nil {
			errs = append(errs, fmt.Errorf("server: config: %s: %w", from, err))
		}
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == "AGENTIC_LISTEN":
			set("listen", value, name)
		case name == "AGENTIC_STORAGE":
			set("storage", value, name)
		case strings.HasPrefix(name, "AGENTIC_CONFIG_"):
			path := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "AGENTIC_CONFIG_"), "__", "."))
			set(path, value, name)
		}
	}
	for _, f := range flags {
		path, value, ok := strings.Cut(f, "=")
		if !ok || path == "" {
			errs = append(errs, fmt.Errorf("server: config: --set %q: want PATH=VALUE", f))
			continue
		}
		set(path, value, "--set "+path)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	b, err = yaml.Marshal(&root)
	if err != nil {
		return cfg, err
	}
	out, err := decodeStrict(b)
	if err != nil {
		return cfg, fmt.Errorf("server: config overrides: %w", err)
	}
	return out, nil
}

// setOverride checks that path names a field of Config and that value
// fits it, then sets it in the document root.
func setOverride(root *yaml.Node, path []string, value string) error {
	typ, err := fieldType(path)
	if err != nil {
		return err
	}
	v := overrideValue(value)
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
		// The lines are those of the value itself: say nothing of them.
		return fmt.Errorf("%s", lineOf.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n"), ""))
	}
	return setPath(root, path, v)
}

// lineOf matches the line numbers of YAML errors.
var lineOf = regexp.MustCompile(`(?m)^\s*line \d+: `)

// fieldType returns the type of the field of Config at path: the fields'
// YAML names (in any case), the keys of maps (any), or an error naming the
// first name that is no field.
func fieldType(path []string) (reflect.Type, error) {
	typ := reflect.TypeFor[Config]()
	for i, name := range path {
		if name == "" {
			return nil, fmt.Errorf("an empty name in %q", strings.Join(path, "."))
		}
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		at := "the configuration"
		if i > 0 {
			at = strings.Join(path[:i], ".")
		}
		switch {
		case typ.Kind() == reflect.Map:
			typ = typ.Elem()
		case typ.Kind() == reflect.Struct && typ != reflect.TypeFor[Duration]():
			var names []string
			found := false
			for j := range typ.NumField() {
				f := typ.Field(j)
				tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				if tag == "" || tag == "-" {
					continue
				}
				names = append(names, tag)
				if strings.EqualFold(tag, name) {
					typ, found = f.Type, true
					break
				}
			}
			if !found {
				return nil, fmt.Errorf("%s has no field %q (it has %s)", at, name, strings.Join(names, ", "))
			}
		default:
			return nil, fmt.Errorf("%s is a value, not a mapping: it has no field %q", at, name)
		}
	}
	return typ, nil
}

// overrideValue is the YAML node of an override's value: a plain or
// quoted scalar, or a flow sequence or mapping; anything else (a block
// mapping such as "Note: be brief") is the text itself.
func overrideValue(value string) *yaml.Node {
	text := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil || len(doc.Content) != 1 {
		return text
	}
	n := doc.Content[0]
	switch {
	case n.Kind == yaml.ScalarNode && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0:
	case (n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode) && n.Style&yaml.FlowStyle != 0:
	default:
		return text
	}
	n.Line, n.Column, n.HeadComment, n.LineComment, n.FootComment = 0, 0, "", "", ""
	return n
}

// setPath sets the node at path in the document root to v, creating the
// mappings it goes through. Mapping keys match in any case.
func setPath(root *yaml.Node, path []string, v *yaml.Node) error {
	n := root
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			n.Content = []*yaml.Node{{Kind: yaml.MappingNode}}
		}
		n = n.Content[0]
	}
	for i, key := range path {
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				n.Kind, n.Tag, n.Value = yaml.MappingNode, "", ""
			} else {
				return fmt.Errorf("%s is not a mapping", strings.Join(path[:i], "."))
			}
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if strings.EqualFold(n.Content[j].Value, key) {
				next = n.Content[j+1]
				break
			}
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, next)
		}
		n = next
	}
	*n = *v
	return nil
}

// ledgerFeatures returns LedgerFeatures: nil when absent (every feature),
// empty for none.
func (cfg Config) ledgerFeatures() []ledger.Feature {
	if cfg.LedgerFeatures == nil {
		return nil
	}
	if *cfg.LedgerFeatures == nil {
		return []ledger.Feature{}
	}
	return *cfg.LedgerFeatures
}

// normalized fills the defaults and checks cfg, returning every problem.
func (cfg Config) normalized() (Config, error) {
	var errs []error
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Storage == "" {
		cfg.Storage = DefaultStorage
	}
	if cfg.Model.APIKeyEnv == "" {
		cfg.Model.APIKeyEnv = "OPENROUTER_API_KEY"
	}
	if cfg.AutoResume == nil {
		on := true
		cfg.AutoResume = &on
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxPluginBytes == 0 {
		cfg.MaxPluginBytes = DefaultMaxPluginBytes
	}
	if cfg.MaxArchiveBytes == 0 {
		cfg.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = Duration(DefaultHeartbeat)
	}
	if cfg.StreamWriteTimeout == 0 {
		cfg.StreamWriteTimeout = Duration(DefaultStreamWrite)
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = Duration(DefaultBodyTimeout)
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = Duration(DefaultIdleTimeout)
	}
	if cfg.StreamMaxAge == 0 {
		cfg.StreamMaxAge = Duration(DefaultStreamMaxAge)
	}
	for _, f := range cfg.ledgerFeatures() {
		if !ledger.KnownFeature(f) {
			errs = append(errs, fmt.Errorf("ledger_features: %q is not a ledger feature of this build (want some of %v)", f, ledger.Features()))
		}
	}
	if u := cfg.TraceURL; u != "" && (!strings.Contains(u, "{trace_id}") || !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://")) {
		errs = append(errs, fmt.Errorf("trace_url %q: want an http or https URL with {trace_id} where the trace's id goes", u))
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
		if n := openFileLimit(); n > 0 && n*3/4 < cfg.MaxStreams {
			cfg.MaxStreams = max(1, n*3/4)
		}
	}
	if cfg.MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("max_streams %d is negative", cfg.MaxStreams))
	}
	if cfg.MaxRuns == 0 {
		cfg.MaxRuns = DefaultMaxRuns
		if n := openFileLimit(); n > 0 && n/4 < cfg.MaxRuns {
			cfg.MaxRuns = max(1, n/4)
		}
	}
	if cfg.QueueRuns < 0 || cfg.QueueTimeout < 0 {
		errs = append(errs, fmt.Errorf("queue_runs %d and queue_timeout %s: want neither negative", cfg.QueueRuns, time.Duration(cfg.QueueTimeout)))
	}
	if cfg.MaxRuns < 0 {
		errs = append(errs, fmt.Errorf("max_runs %d is negative", cfg.MaxRuns))
	}
	if cfg.MaxImports == 0 {
		cfg.MaxImports = DefaultMaxImports
	}
	if cfg.MaxImports < 0 {
		errs = append(errs, fmt.Errorf("max_imports %d is negative", cfg.MaxImports))
	}
	switch {
	case cfg.ResumeMaxAttempts < 0:
		errs = append(errs, fmt.Errorf("resume_max_attempts %d is negative", cfg.ResumeMaxAttempts))
	case cfg.ResumeMaxAttempts > 0 && !*cfg.AutoResume:
		errs = append(errs, errors.New("resume_max_attempts needs auto_resume"))
	}
	for name, d := range map[string]Duration{"lease_ttl": cfg.LeaseTTL, "shutdown_grace": cfg.ShutdownGrace, "heartbeat": cfg.Heartbeat,
		"stream_write_timeout": cfg.StreamWriteTimeout, "body_timeout": cfg.BodyTimeout, "idle_timeout": cfg.IdleTimeout, "stream_max_age": cfg.StreamMaxAge} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", name, time.Duration(d)))
		}
	}
	if cfg.BlobThreshold < -1 {
		errs = append(errs, errors.New("blob_threshold is negative (use -1 to keep every byte in the ledger)"))
	}
	if cfg.MaxRequestBytes < 0 || cfg.MaxPluginBytes < 0 || cfg.MaxArchiveBytes < 0 {
		errs = append(errs, errors.New("max_request_bytes, max_plugin_bytes and max_archive_bytes must be positive"))
	}
	for _, b := range []struct {
		name string
		v    *int
		def  int
	}{{"max_plugin_uploads", &cfg.MaxPluginUploads, DefaultMaxPluginUploads},
		{"max_schedule_text_bytes", &cfg.MaxScheduleTextBytes, DefaultMaxScheduleTextBytes},
		{"max_schedules", &cfg.MaxSchedules, DefaultMaxSchedules}} {
		switch {
		case *b.v == 0:
			*b.v = b.def
		case *b.v < 0:
			errs = append(errs, fmt.Errorf("%s %d is negative", b.name, *b.v))
		}
	}
	if len(cfg.Tenants) == 0 {
		errs = append(errs, errors.New("tenants: none configured"))
	}
	tenants := map[string]TenantConfig{}
	for _, name := range sortedKeys(cfg.Tenants) {
		t, err := cfg.Tenants[name].normalized(name)
		errs = append(errs, err)
		tenants[name] = t
	}
	cfg.Tenants = tenants
	for _, name := range sortedKeys(cfg.Tenants) {
		list := cfg.Tenants[name].Schedules
		if len(list) > cfg.MaxSchedules {
			errs = append(errs, fmt.Errorf("tenants.%s: schedules: %d, at most %d (max_schedules)", name, len(list), cfg.MaxSchedules))
		}
		for i, c := range list {
			if len(c.Text) > cfg.MaxScheduleTextBytes {
				errs = append(errs, fmt.Errorf("tenants.%s: schedules[%d] (%s): %s", name, i, c.ID, scheduleTextProblem(c, cfg.MaxScheduleTextBytes)))
			}
		}
	}
	return cfg, errors.Join(errs...)
}

func (t TenantConfig) normalized(name string) (TenantConfig, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("tenants.%s: "+format, append([]any{name}, args...)...))
	}
	if !tenantName.MatchString(name) {
		bad("a tenant's name is 1 to 32 of [a-z0-9_-], starting with a letter or digit")
	}
	for i, k := range t.Keys {
		if hex, ok := strings.CutPrefix(k.Hash, "sha256:"); !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			bad("keys[%d]: want sha256:HEX, the SHA-256 of the key (agentic-host keys hash KEY prints it)", i)
		}
		if k.User != "" && !validUser(k.User) {
			bad("keys[%d]: user %q: want 1 to %d bytes of printable characters without spaces", i, k.User, maxUserBytes)
		}
	}
	if r := t.Retention; r != nil {
		if r.Every == 0 {
			r.Every = Duration(DefaultRetentionEvery)
		}
		if r.Every < 0 {
			bad("retention.every is negative")
		}
		if err := r.Policy(name).Check(); err != nil {
			bad("%v", err)
		}
		if r.KeepDays == 0 && r.KeepLast == 0 {
			bad("retention: set keep_days, keep_last or both")
		}
	}
	if t.BudgetUSDPerDay < 0 {
		bad("budget_usd_per_day is negative")
	}
	if t.EvalBudgetUSDPerDay < 0 {
		bad("eval_budget_usd_per_day is negative")
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"max_depth", t.Delegation.MaxDepth}, {"max_per_run", t.Delegation.MaxPerRun}, {"max_per_message", t.Delegation.MaxPerMessage}} {
		if d.v < -1 {
			bad("delegation.%s %d: want a bound, 0 for the default or -1 for none", d.name, d.v)
		}
	}
	if t.BlobQuotaBytes < 0 {
		bad("blob_quota_bytes is negative")
	}
	if t.MaxBlobBytes < 0 {
		bad("max_blob_bytes is negative")
	}
	if t.PluginFuelPerDay < 0 {
		bad("plugin_fuel_per_day is negative")
	}
	if t.PluginFuelRefusesRuns && t.PluginFuelPerDay == 0 {
		bad("plugin_fuel_refuses_runs needs plugin_fuel_per_day")
	}
	if a := t.BudgetAsk; a != nil {
		switch {
		case t.BudgetUSDPerDay == 0 && t.PluginFuelPerDay == 0:
			bad("budget_ask needs budget_usd_per_day or plugin_fuel_per_day")
		case a.RaiseUSD < 0 || a.RaiseFuel < 0:
			bad("budget_ask: negative raises")
		}
		if a.RaiseUSD == 0 {
			a.RaiseUSD = t.BudgetUSDPerDay / 10
		}
		if a.RaiseFuel == 0 {
			a.RaiseFuel = t.PluginFuelPerDay / 10
		}
	}
	if r := t.RateLimit; r.RequestsPerSecond < 0 || r.Burst < 0 || r.ConcurrentRuns < 0 || r.Streams < 0 || r.StreamsPerKey < 0 || r.ConcurrentImports < 0 ||
		r.QueueRuns < 0 || r.QueueRequests < 0 || r.QueueTimeout < 0 {
		bad("rate_limit: negative values")
	}
	if pu := t.RateLimit.PerUser; pu != nil && (pu.ConcurrentRuns < 0 || pu.RequestsPerSecond < 0 || pu.Burst < 0 || pu.Streams < 0) {
		bad("rate_limit.per_user: negative values")
	}
	if r := t.RateLimit; r.QueueRequests > 0 && r.RequestsPerSecond == 0 {
		bad("rate_limit.queue_requests needs rate_limit.requests_per_second: the queue waits for its tokens")
	}
	if r := t.RateLimit; r.QueueRuns > 0 && r.ConcurrentRuns == 0 {
		bad("rate_limit.queue_runs needs rate_limit.concurrent_runs: the queue waits for a place under it")
	}
	if t.RateLimit.ConcurrentImports == 0 {
		t.RateLimit.ConcurrentImports = 1
	}
	if t.RateLimit.Streams == 0 {
		t.RateLimit.Streams = DefaultTenantStreams
	}
	if t.RateLimit.StreamsPerKey == 0 {
		t.RateLimit.StreamsPerKey = DefaultKeyStreams
	}
	for _, m := range sortedKeys(t.PluginConfig) {
		if m == "" || strings.ContainsAny(m, `/\`) || strings.HasSuffix(m, ".wasm") {
			bad("plugin_config: %q is not a module name (a plugin file's name without .wasm)", m)
		}
		for _, k := range sortedKeys(t.PluginConfig[m]) {
			if k == "" {
				bad("plugin_config.%s: an empty key", m)
			}
		}
	}
	if t.CompactionLimit < 0 || t.CompactionLimit > 1 {
		bad("compaction_limit must be in (0, 1]")
	}
	t.Sandbox.Secrets = slices.Clone(t.Sandbox.Secrets)
	for i := range t.Sandbox.Secrets {
		s := &t.Sandbox.Secrets[i]
		if s.Plugin == "" || s.Host == "" {
			bad("sandbox.secrets[%d]: plugin and host are required", i)
			continue
		}
		if err := s.resolve(os.Getenv); err != nil {
			bad("sandbox.secrets[%d] (%s, %s): %v", i, s.Plugin, s.Host, err)
		}
	}
	named := sortedKeys(t.Sandbox.Grants)
	for _, s := range t.Sandbox.Secrets {
		if !slices.Contains(named, s.Plugin) {
			named = append(named, s.Plugin)
		}
	}
	for _, m := range named {
		if _, err := t.Sandbox.limits().Within(t.Sandbox.grant(m)); err != nil {
			bad("sandbox: plugin %s: %v", m, err)
		}
	}
	if err := t.Sandbox.limits().Validate(); err != nil {
		bad("sandbox: %v", err)
	}
	for i, ref := range t.Plugins {
		if _, err := oci.ParseReference(ref); err != nil {
			bad("plugins[%d]: %v", i, err)
		}
	}
	if len(t.Sandbox.TrustedKeys)+len(t.Sandbox.TrustedKeyFiles) > 0 {
		ring, err := plugins.ParseKeyring(t.Sandbox.TrustedKeys...)
		if err != nil {
			bad("sandbox.trusted_keys: %v", err)
		}
		files, err := plugins.ReadKeyring(t.Sandbox.TrustedKeyFiles...)
		if err != nil {
			bad("sandbox.trusted_key_files: %v", err)
		}
		if ring != nil && files != nil {
			t.Sandbox.keyring = ring.With(files)
		}
	}
	if q := t.Sandbox.Quarantine; q.Failures < -1 || q.Window < 0 {
		bad("sandbox.quarantine: failures must be -1 (off), 0 (the default, %d) or more, and window not negative", DefaultQuarantineFailures)
	}
	t.MCPServers = slices.Clone(t.MCPServers)
	mcpNames := map[string]bool{}
	for i := range t.MCPServers {
		m := &t.MCPServers[i]
		if mcpNames[m.Name] {
			bad("mcp_servers[%d]: the name %s is taken", i, m.Name)
		}
		mcpNames[m.Name] = true
		for _, problem := range m.validate(t.Sandbox.limits(), os.Getenv) {
			bad("mcp_servers[%d] (%s): %s", i, m.Name, problem)
		}
	}
	for _, problem := range mcpCollisions(t.MCPServers) {
		bad("mcp_servers: %s", problem)
	}
	if w := t.Webhooks; w != nil {
		c := *w
		c.Endpoints = slices.Clone(c.Endpoints)
		t.Webhooks = &c
		for _, problem := range c.validate(t.Sandbox.limits(), os.Getenv) {
			bad("webhooks: %s", problem)
		}
	}
	if len(t.Agents) == 0 {
		model := ""
		if len(t.Models) > 0 {
			model = t.Models[0]
		}
		t.Agents = map[string]AgentConfig{"default": {Model: model}}
	}
	agents := map[string]AgentConfig{}
	for _, an := range sortedKeys(t.Agents) {
		a := t.Agents[an]
		if len(a.Models) > 0 {
			if a.Model != "" && a.Model != a.Models[0] {
				bad("agents.%s: model %s and models %v disagree: models names the model first (give one of them)", an, a.Model, a.Models)
			}
			a.Model = a.Models[0]
		}
		if a.Model == "" && len(t.Models) == 1 {
			a.Model = t.Models[0]
		}
		switch {
		case !host.ValidToolName(an):
			bad("agents.%s: an agent's name is 1 to 64 of [A-Za-z0-9_-]", an)
		case a.Model == "":
			bad("agents.%s: model is required", an)
		case len(t.Models) > 0 && !slices.Contains(t.Models, a.Model):
			bad("agents.%s: model %s is not among the tenant's models", an, a.Model)
		}
		for i, m := range a.Models {
			switch {
			case i == 0:
			case m == "" || slices.Contains(a.Models[:i], m):
				bad("agents.%s: models: %q is empty or named twice", an, m)
			case len(t.Models) > 0 && !slices.Contains(t.Models, m):
				bad("agents.%s: models: %s is not among the tenant's models", an, m)
			}
		}
		for _, problem := range extraBodyProblems(a.ExtraBody, t.Models) {
			bad("agents.%s: extra_body: %s", an, problem)
		}
		if a.Retry != nil {
			if err := a.Retry.policy().Validate(); err != nil {
				problems := []error{err}
				if j, ok := err.(interface{ Unwrap() []error }); ok {
					problems = j.Unwrap()
				}
				for _, p := range problems {
					bad("agents.%s: retry: %s", an, retryProblem(p))
				}
			}
		}
		for _, m := range a.MCP {
			if !mcpNames[m] {
				bad("agents.%s: mcp: %s is not among the tenant's mcp_servers", an, m)
			}
		}
		if a.Smooth != nil {
			if _, err := host.NewSmoother[int](a.Smooth.options()); err != nil {
				bad("agents.%s: smooth: %v", an, err)
			}
		}
		if a.CompactionLimit < 0 || a.CompactionLimit > 1 {
			bad("agents.%s: compaction_limit must be in (0, 1]", an)
		}
		switch host.ResumeAction(a.OnInterrupted) {
		case "", host.ActionResume, host.ActionRestart, host.ActionFail, host.ActionLeave:
		default:
			bad("agents.%s: on_interrupted %q: want resume, restart, fail or leave", an, a.OnInterrupted)
		}
		switch host.Overlap(a.Overlap) {
		case "", host.OverlapQueue, host.OverlapReject, host.OverlapInterrupt, host.OverlapRollback:
		default:
			bad("agents.%s: overlap %q: want queue, reject, interrupt or rollback", an, a.Overlap)
		}
		agents[an] = a
	}
	t.Agents = agents
	for _, problem := range validateDelegates(t.Agents) {
		bad("%s", problem)
	}
	for _, problem := range validateSchedules(t.Schedules, t.Agents) {
		bad("%s", problem)
	}
	return t, errors.Join(errs...)
}

// extraBodyProblems checks an agent's extra_body against the tenant's
// models (none: any).
func extraBodyProblems(extra map[string]any, models []string) []string {
	var out []string
	for _, k := range sortedKeys(extra) {
		v := extra[k]
		switch {
		case host.HostBodyField(k):
			out = append(out, fmt.Sprintf("%s: the host writes that field itself (give the agent's model, models or max_tokens instead)", k))
		case k == "route" && len(models) > 0:
			out = append(out, "route: it lets the endpoint pick a model outside the tenant's models; list them in extra_body.models instead")
		case k == "models":
			var list []string
			b, err := json.Marshal(v)
			if err != nil || json.Unmarshal(b, &list) != nil || len(list) == 0 {
				out = append(out, "models: want a list of model ids")
				break
			}
			for i, id := range list {
				switch {
				case id == "":
					out = append(out, fmt.Sprintf("models[%d]: want a model id", i))
				case len(models) > 0 && !slices.Contains(models, id):
					out = append(out, fmt.Sprintf("models[%d]: %s is not among the tenant's models", i, id))
				}
			}
		default:
			if _, err := json.Marshal(v); err != nil {
				out = append(out, fmt.Sprintf("%s: %v", k, err))
			}
		}
	}
	return out
}

// validateDelegates checks the agents' delegate_to: each names another
// agent of the tenant, once, and no agent reaches itself through them.
func validateDelegates(agents map[string]AgentConfig) []string {
	var problems []string
	for _, an := range sortedKeys(agents) {
		seen := map[string]bool{}
		for _, d := range agents[an].DelegateTo {
			switch _, ok := agents[d]; {
			case d == an:
				problems = append(problems, fmt.Sprintf("agents.%s: delegate_to: an agent cannot delegate to itself", an))
			case !ok:
				problems = append(problems, fmt.Sprintf("agents.%s: delegate_to: %s is not among the tenant's agents", an, d))
			case seen[d]:
				problems = append(problems, fmt.Sprintf("agents.%s: delegate_to: %s is named twice", an, d))
			}
			seen[d] = true
		}
	}
	if len(problems) > 0 {
		return problems
	}
	// Depth-first, with the path, so that a cycle is reported by its
	// members.
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var visit func(an string, path []string)
	visit = func(an string, path []string) {
		switch state[an] {
		case done:
			return
		case visiting:
			i := slices.Index(path, an)
			problems = append(problems, fmt.Sprintf("agents: delegate_to forms a cycle: %s", strings.Join(append(path[i:], an), " → ")))
			return
		}
		state[an] = visiting
		for _, d := range agents[an].DelegateTo {
			visit(d, append(path, an))
		}
		state[an] = done
	}
	for _, an := range sortedKeys(agents) {
		visit(an, nil)
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
