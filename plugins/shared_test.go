package plugins_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestCompiledModulesShared: tenants that load the same module with the
// same manifest (memory bounds, configuration) share its compiled code —
// decoded, validated and mapped once — while each keeps its own
// instances, configuration and life: a tenant's module closed leaves the
// other's serving; the last one closed frees the code. Their bytes are
// kept once too.
func TestCompiledModulesShared(t *testing.T) {
	ctx := context.Background()
	rt, _ := newRuntime(t)
	wasm := jsHostileWasm(t)
	loadFor := func(tenant, region string, limits plugins.Limits) *plugins.Module {
		return plugintest.Load(t, rt, plugins.Source{Name: "hostile_js", Wasm: wasm, Tenant: tenant, Config: map[string]string{"region": region}, Limits: limits})
	}
	config := func(m *plugins.Module) string {
		t.Helper()
		res, err := callTool(t, m, "config", `{}`)
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		return res.Output
	}

	acme := loadFor("acme", "eu", plugins.Limits{})
	beta := loadFor("beta", "eu", plugins.Limits{})
	if n := plugins.SharedPlugins(rt); n != 1 {
		t.Fatalf("two tenants, one module and manifest: %d compiled modules, want 1", n)
	}
	gamma := loadFor("gamma", "us", plugins.Limits{})
	delta := loadFor("delta", "eu", plugins.Limits{MemoryPages: 1024})
	if n := plugins.SharedPlugins(rt); n != 3 {
		t.Fatalf("another configuration, other memory bounds: %d compiled modules, want 3", n)
	}
	if got := config(gamma); got != `{"region":"us","missing":null}` {
		t.Errorf("gamma's configuration: %s", got)
	}
	for _, m := range []*plugins.Module{acme, beta, delta} {
		if got := config(m); got != `{"region":"eu","missing":null}` {
			t.Errorf("%s's configuration: %s", m.Tenant(), got)
		}
	}
	// Each tenant's instances are its own: a call that leaves its
	// instance's memory changed is seen by no other tenant's call.
	for _, m := range []*plugins.Module{acme, beta} {
		if res, err := callTool(t, m, "state", `{}`); err != nil || res.Output != `{"calls":1,"leak":1}` {
			t.Errorf("%s's state: %s, %v", m.Tenant(), res.Output, err)
		}
	}

	acme.Close(ctx)
	<-acme.Done()
	if got := config(beta); got != `{"region":"eu","missing":null}` {
		t.Errorf("beta after acme's module closed: %s", got)
	}
	if n := plugins.SharedPlugins(rt); n != 3 {
		t.Errorf("acme's module closed, beta's serving: %d compiled modules, want 3", n)
	}
	for _, m := range []*plugins.Module{beta, gamma, delta} {
		m.Close(ctx)
		<-m.Done()
	}
	if n := plugins.SharedPlugins(rt); n != 0 {
		t.Errorf("every module closed: %d compiled modules left, want none", n)
	}

	// A module's bytes, read by each tenant into its own slice, are kept
	// once.
	echo := cEchoWasm(t)
	var kept [][]byte
	for _, tenant := range []string{"acme", "beta"} {
		m := plugintest.Load(t, rt, plugins.Source{Name: "echo", Wasm: bytes.Clone(echo), Tenant: tenant})
		kept = append(kept, plugins.ModuleBytes(m))
	}
	if !bytes.Equal(kept[0], echo) || &kept[0][0] != &kept[1][0] {
		t.Errorf("two tenants' copies of one module: kept apart (or changed), want one copy")
	}
}
