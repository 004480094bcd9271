package server_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// fullConfig sets a field of every kind: scalars, durations (as text and
// as seconds), a pointer, lists, maps of structs.
const fullConfig = `listen: 127.0.0.1:9000
storage: "memory:"
host_id: host-a
lease_ttl: 20s
auto_resume: false
heartbeat: 2.5
max_request_bytes: 2048
tenants:
  acme:
    keys: [sha256:` + zeroHash + `]
    models: [test/model, other/model]
    budget_usd_per_day: 12.5
    plugin_fuel_per_day: 1000000000
    plugin_fuel_refuses_runs: true
    budget_ask:
      raise_usd: 2
    rate_limit:
      requests_per_second: 3
      concurrent_runs: 2
    sandbox:
      allowed_hosts: [api.example.com]
      call_timeout: 2s
      fuel: 5000000
    agents:
      writer:
        model: other/model
        system: "Note: be brief."
        approve: [publish_post]
        timeouts:
          total: 1m
`

const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// TestLoadConfig: a file is read into every field; an unknown field, a
// value of the wrong type and a bad duration are errors that name their
// line.
func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := server.LoadConfig(writeFile(t, dir, "full.yaml", fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	acme := cfg.Tenants["acme"]
	writer := acme.Agents["writer"]
	switch {
	case cfg.Listen != "127.0.0.1:9000" || cfg.Storage != "memory:" || cfg.HostID != "host-a":
		t.Errorf("scalars: %+v", cfg)
	case time.Duration(cfg.LeaseTTL) != 20*time.Second || time.Duration(cfg.Heartbeat) != 2500*time.Millisecond:
		t.Errorf("durations: %v %v", cfg.LeaseTTL, cfg.Heartbeat)
	case cfg.AutoResume == nil || *cfg.AutoResume:
		t.Errorf("auto_resume: %v", cfg.AutoResume)
	case cfg.MaxRequestBytes != 2048 || acme.BudgetUSDPerDay != 12.5 || acme.RateLimit.RequestsPerSecond != 3 || acme.RateLimit.ConcurrentRuns != 2:
		t.Errorf("numbers: %+v", cfg)
	case !slices.Equal(acme.Models, []string{"test/model", "other/model"}) || !slices.Equal(acme.Sandbox.AllowedHosts, []string{"api.example.com"}):
		t.Errorf("lists: %+v", acme)
	case writer.Model != "other/model" || writer.System != "Note: be brief." || time.Duration(writer.Timeouts.Total) != time.Minute:
		t.Errorf("agent: %+v", writer)
	case acme.PluginFuelPerDay != 1_000_000_000 || !acme.PluginFuelRefusesRuns || acme.Sandbox.Fuel != 5_000_000:
		t.Errorf("fuel: %d %v %d", acme.PluginFuelPerDay, acme.PluginFuelRefusesRuns, acme.Sandbox.Fuel)
	case acme.BudgetAsk == nil || acme.BudgetAsk.RaiseUSD != 2:
		t.Errorf("budget_ask: %+v", acme.BudgetAsk)
	}

	if cfg, err := server.LoadConfig(writeFile(t, dir, "empty.yaml", "")); err != nil || cfg.Listen != "" {
		t.Errorf("an empty file: %+v, %v", cfg, err)
	}
	if _, err := server.LoadConfig(dir + "/missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level field", "listen: x\nlisten_port: 80\n", []string{"line 2", "listen_port"}},
		{"unknown nested field", "tenants:\n  acme:\n    models: [a]\n    colour: red\n", []string{"line 4", "colour"}},
		{"unknown agent field", "tenants:\n  acme:\n    agents:\n      default:\n        modle: x\n", []string{"line 5", "modle"}},
		{"wrong type", "tenants:\n  acme:\n    budget_usd_per_day: lots\n", []string{"line 3", "lots"}},
		{"a list for a scalar", "listen: [a, b]\n", []string{"line 1"}},
		{"bad duration", "heartbeat: soon\n", []string{"line 1", "soon"}},
		{"several problems", "listen_port: 80\nheartbeat: soon\n", []string{"line 1", "listen_port", "line 2", "soon"}},
		{"not YAML", "listen: [\n", []string{"line"}},
	} {
		_, err := server.LoadConfig(writeFile(t, dir, "bad.yaml", c.yaml))
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, w)
			}
		}
	}
}

// TestApplyOverrides: the environment's AGENTIC_CONFIG_… variables and
// --set flags set any field (lists as [a, b]); a flag wins over the
// environment, which wins over the file; an override of a field that does
// not exist, or of the wrong type, is an error that names the override.
func TestApplyOverrides(t *testing.T) {
	dir := t.TempDir()
	file, err := server.LoadConfig(writeFile(t, dir, "full.yaml", fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=/usr/bin", "AGENTIC_OTHER=x", // not overrides
		"AGENTIC_LISTEN=127.0.0.1:9100",
		"AGENTIC_STORAGE=file:/tmp/env",
		"AGENTIC_CONFIG_HOST_ID=host-env",
		"AGENTIC_CONFIG_TENANTS__ACME__BUDGET_USD_PER_DAY=5",
		"AGENTIC_CONFIG_TENANTS__ACME__MODELS=[test/model, env/model]",
		"AGENTIC_CONFIG_TENANTS__ACME__RATE_LIMIT__BURST=9",
		"AGENTIC_CONFIG_TENANTS__BETA__MODELS=[beta/model]",
		"AGENTIC_CONFIG_HEARTBEAT=3s",
	}
	flags := []string{
		"listen=127.0.0.1:9200",
		"tenants.acme.budget_usd_per_day=7",
		"tenants.acme.agents.writer.system=Note: flags win.",
		"tenants.acme.agents.writer.approve=[publish_post, get_account]",
		"tenants.acme.sandbox.kv=true",
		"auto_resume=true",
		"tenants.acme.agents.writer.timeouts.step=45s",
		"tenants.acme.agents.default.system=42",
	}
	cfg, err := server.ApplyOverrides(file, env, flags)
	if err != nil {
		t.Fatal(err)
	}
	acme, beta := cfg.Tenants["acme"], cfg.Tenants["beta"]
	writer := acme.Agents["writer"]
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"listen: the flag over the environment", cfg.Listen, "127.0.0.1:9200"},
		{"storage: the environment over the file", cfg.Storage, "file:/tmp/env"},
		{"host_id", cfg.HostID, "host-env"},
		{"budget: the flag over the environment", acme.BudgetUSDPerDay, 7.0},
		{"models: a list from the environment", strings.Join(acme.Models, ","), "test/model,env/model"},
		{"burst", acme.RateLimit.Burst, 9},
		{"requests_per_second: the file's, untouched", acme.RateLimit.RequestsPerSecond, 3.0},
		{"a new tenant", strings.Join(beta.Models, ","), "beta/model"},
		{"heartbeat", time.Duration(cfg.Heartbeat), 3 * time.Second},
		{"a text with a colon", writer.System, "Note: flags win."},
		{"approve: a list from a flag", strings.Join(writer.Approve, ","), "publish_post,get_account"},
		{"a bool", acme.Sandbox.KV, true},
		{"a pointer", cfg.AutoResume != nil && *cfg.AutoResume, true},
		{"a nested duration", time.Duration(writer.Timeouts.Step), 45 * time.Second},
		{"the file's nested duration, untouched", time.Duration(writer.Timeouts.Total), time.Minute},
		{"a number for a text", acme.Agents["default"].System, "42"},
		{"the file's agent model, untouched", writer.Model, "other/model"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if file.Listen != "127.0.0.1:9000" || file.Tenants["acme"].BudgetUSDPerDay != 12.5 {
		t.Errorf("ApplyOverrides changed its argument: %+v", file)
	}

	for _, c := range []struct {
		name       string
		env, flags []string
		want, not  []string
	}{
		{name: "an unknown field from a flag", flags: []string{"tenants.acme.colour=red"},
			want: []string{"--set tenants.acme.colour", "colour"}, not: []string{"line "}},
		{name: "an unknown field from the environment", env: []string{"AGENTIC_CONFIG_LISTEN_PORT=80"},
			want: []string{"AGENTIC_CONFIG_LISTEN_PORT", "listen_port"}, not: []string{"line "}},
		{name: "a wrong type", flags: []string{"tenants.acme.budget_usd_per_day=lots"},
			want: []string{"--set tenants.acme.budget_usd_per_day", "lots"}, not: []string{"line "}},
		{name: "a bad duration", env: []string{"AGENTIC_CONFIG_HEARTBEAT=soon"},
			want: []string{"AGENTIC_CONFIG_HEARTBEAT", "soon"}, not: []string{"line "}},
		{name: "below a scalar", flags: []string{"listen.port=80"}, want: []string{"--set listen.port"}},
		{name: "a list for a scalar", flags: []string{"listen=[a, b]"}, want: []string{"--set listen"}},
		{name: "not PATH=VALUE", flags: []string{"listen"}, want: []string{`"listen"`, "PATH=VALUE"}},
		{name: "an empty name", flags: []string{"tenants..keys=[]"}, want: []string{"--set tenants..keys"}},
		{name: "every problem at once", env: []string{"AGENTIC_CONFIG_COLOUR=red"}, flags: []string{"heartbeat=soon", "x"},
			want: []string{"AGENTIC_CONFIG_COLOUR", "--set heartbeat", `"x"`}},
	} {
		_, err := server.ApplyOverrides(file, c.env, c.flags)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, w)
			}
		}
		for _, w := range c.not {
			if err != nil && strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v says %q, which means nothing for an override", c.name, err, w)
			}
		}
	}
}

// TestNewReportsEveryProblem: New returns every problem of the
// configuration at once, each naming where it is.
func TestNewReportsEveryProblem(t *testing.T) {
	cfg := server.Config{
		Heartbeat:         server.Duration(-time.Second),
		ResumeMaxAttempts: -1,
		BlobThreshold:     -2,
		MaxPluginUploads:  -1,
		MaxSchedules:      -1,
		Tenants: map[string]server.TenantConfig{
			"Bad Name": {Models: []string{"m"}},
			"acme": {
				Keys:            []server.KeyConfig{{Hash: "plaintext-key"}},
				Models:          []string{"allowed/model"},
				BudgetUSDPerDay: -1,
				RateLimit:       server.RateLimitConfig{ConcurrentRuns: -2},
				Sandbox:         server.SandboxConfig{MemoryPages: 70000},
				CompactionLimit: 2,
				Agents: map[string]server.AgentConfig{
					"writer":    {Model: "other/model"},
					"bad agent": {Model: "allowed/model"},
					"policy":    {Model: "allowed/model", OnInterrupted: "retry", Overlap: "drop", CompactionLimit: 1.5},
				},
			},
			"nomodel": {Agents: map[string]server.AgentConfig{"default": {}}},
			"fuel":    {PluginFuelPerDay: -5},
			"blobs":   {BlobQuotaBytes: -1, MaxBlobBytes: -1},
			"evals":   {EvalBudgetUSDPerDay: -1, Delegation: server.DelegationConfig{MaxDepth: -2}},
			"fuel2":   {PluginFuelRefusesRuns: true},
			"warm":    {Sandbox: server.SandboxConfig{Instances: 2, WarmInstances: 3}},
			"ask":     {BudgetAsk: &server.BudgetAskConfig{}},
			"ask2":    {BudgetUSDPerDay: 1, BudgetAsk: &server.BudgetAskConfig{RaiseUSD: -1}},
		},
	}
	_, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
	if err == nil {
		t.Fatal("New accepted a bad configuration")
	}
	for _, want := range []string{
		"heartbeat",
		"resume_max_attempts -1 is negative",
		`tenants.Bad Name: a tenant's name`,
		"tenants.acme: keys[0]",
		"tenants.acme: budget_usd_per_day",
		"tenants.acme: rate_limit",
		"tenants.acme: sandbox",
		"MemoryPages",
		"tenants.acme: agents.writer: model other/model is not among the tenant's models",
		"tenants.acme: agents.bad agent",
		"tenants.acme: compaction_limit",
		`tenants.acme: agents.policy: on_interrupted "retry": want resume, restart, fail or leave`,
		`tenants.acme: agents.policy: overlap "drop": want queue, reject, interrupt or rollback`,
		"tenants.acme: agents.policy: compaction_limit must be in (0, 1]",
		"tenants.nomodel: agents.default: model is required",
		"tenants.fuel: plugin_fuel_per_day is negative",
		"WarmInstances 3 is more than Instances 2",
		"blob_threshold is negative",
		"tenants.blobs: blob_quota_bytes is negative",
		"tenants.blobs: max_blob_bytes is negative",
		"max_plugin_uploads -1 is negative",
		"max_schedules -1 is negative",
		"tenants.evals: eval_budget_usd_per_day is negative",
		"tenants.evals: delegation.max_depth -2",
		"tenants.fuel2: plugin_fuel_refuses_runs needs plugin_fuel_per_day",
		"tenants.ask: budget_ask needs budget_usd_per_day or plugin_fuel_per_day",
		"tenants.ask2: budget_ask: negative raises",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if _, err := server.New(server.Options{Config: server.Config{}, Storage: memory.New(), Model: hosttest.NewModel()}); err == nil ||
		!strings.Contains(err.Error(), "tenants: none configured") {
		t.Errorf("no tenants: %v", err)
	}
	if _, err := server.New(server.Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "Storage") || !strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("no storage nor model, and a bad configuration: %v, want both told", err)
	}
}

// TestModelAllowList: a tenant's agents may use only its models; a tenant
// with one model gives it to the agents that name none; with no list, any
// model goes.
func TestModelAllowList(t *testing.T) {
	build := func(tc server.TenantConfig) error {
		srv, err := server.New(server.Options{Config: server.Config{PluginsDir: t.TempDir(), Tenants: map[string]server.TenantConfig{"acme": tc}},
			Storage: memory.New(), Model: hosttest.NewModel()})
		if err == nil {
			srv.Close(t.Context())
		}
		return err
	}
	for _, c := range []struct {
		name string
		tc   server.TenantConfig
		want string // "" for none
	}{
		{"an allowed model", server.TenantConfig{Models: []string{"a/m", "b/m"}, Agents: map[string]server.AgentConfig{"x": {Model: "b/m"}}}, ""},
		{"a model not allowed", server.TenantConfig{Models: []string{"a/m"}, Agents: map[string]server.AgentConfig{"x": {Model: "b/m"}}},
			"tenants.acme: agents.x: model b/m is not among the tenant's models"},
		{"the one model, by default", server.TenantConfig{Models: []string{"a/m"}, Agents: map[string]server.AgentConfig{"x": {}}}, ""},
		{"no agents: a default one on the first model", server.TenantConfig{Models: []string{"a/m", "b/m"}}, ""},
		{"no list: any model", server.TenantConfig{Agents: map[string]server.AgentConfig{"x": {Model: "any/m"}}}, ""},
		{"two models, an agent naming none", server.TenantConfig{Models: []string{"a/m", "b/m"}, Agents: map[string]server.AgentConfig{"x": {}}},
			"agents.x: model is required"},
	} {
		err := build(c.tc)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	// A request naming an agent runs that agent's model.
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		acme := c.Tenants["acme"]
		acme.Models = []string{hosttest.DefaultModel, "big/model"}
		acme.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel}, "big": {Model: "big/model"}}
		c.Tenants["acme"] = acme
	}})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"hi","agent":"big"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if reqs := ts.model.Requests(); len(reqs) != 1 || reqs[0].Model != "big/model" {
		t.Errorf("the model of the request: %+v", reqs)
	}
}

// TestLedgerFeaturesConfig: ledger_features absent (every feature) and
// empty (none) stay apart through overrides, which go through YAML; a
// name this build does not know is refused.
func TestLedgerFeaturesConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		yaml  string
		flags []string
		want  *[]ledger.Feature
	}{
		{"", []string{"host_id=h"}, nil},
		{"ledger_features: []\n", []string{"host_id=h"}, &[]ledger.Feature{}},
		{"", []string{"ledger_features=[]"}, &[]ledger.Feature{}},
		{"ledger_features: [fork, blob]\n", nil, &[]ledger.Feature{ledger.FeatureFork, ledger.FeatureBlob}},
	} {
		cfg, err := server.LoadConfig(writeFile(t, dir, "c.yaml", "host_id: x\n"+c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err = server.ApplyOverrides(cfg, nil, c.flags); err != nil {
			t.Fatal(err)
		}
		if (cfg.LedgerFeatures == nil) != (c.want == nil) || c.want != nil && !slices.Equal(*cfg.LedgerFeatures, *c.want) {
			t.Errorf("%q with %v: ledger_features %v, want %v", c.yaml, c.flags, cfg.LedgerFeatures, c.want)
		}
	}
	_, err := server.New(server.Options{Config: server.Config{LedgerFeatures: &[]ledger.Feature{"teleport"}}, Storage: memory.New(), Model: hosttest.NewModel()})
	if err == nil || !strings.Contains(err.Error(), `ledger_features: "teleport" is not a ledger feature`) {
		t.Fatalf("an unknown feature: %v", err)
	}
}
