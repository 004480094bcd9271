package server_test

import (
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestPluginConfigRefusals: a tenant's plugin_config names modules (file
// names without .wasm) and non-empty keys; anything else is refused by
// New, saying where.
func TestPluginConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		pc   map[string]map[string]string
		want string
	}{
		{"a file name", map[string]map[string]string{"publish_post.wasm": {"endpoint": "x"}}, `tenants.acme: plugin_config: "publish_post.wasm" is not a module name`},
		{"a path", map[string]map[string]string{"a/b": {"k": "v"}}, `plugin_config: "a/b" is not a module name`},
		{"an empty key", map[string]map[string]string{"publish_post": {"": "v"}}, "tenants.acme: plugin_config.publish_post: an empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server.Config{Tenants: map[string]server.TenantConfig{
				"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Models: []string{hosttest.DefaultModel}, PluginConfig: tc.pc},
			}}
			srv, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
			if err == nil {
				srv.Close(t.Context())
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %s", err, tc.want)
			}
		})
	}
}
