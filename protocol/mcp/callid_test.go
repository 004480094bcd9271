package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
)

// TestEveryCallGetsANewCallID: every tool call gets a call id of its own,
// starting with "mcp-", as the plugin sees it (pdk.Call.ID, its
// idempotency key): two calls with the same arguments — a client's retry
// looks the same — get two different ids, over both transports.
func TestEveryCallGetsANewCallID(t *testing.T) {
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)}, plugins.Limits{}, mcp.Options{})
	seen := map[string]string{}
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			cs := e.connect(t, transport, "caller", nil)
			var ids []string
			for range 2 {
				res := call(t, cs, "ok", nil)
				var out struct {
					CallID string `json:"call_id"`
				}
				if res.IsError || json.Unmarshal([]byte(text(res)), &out) != nil {
					t.Fatalf("ok: error %v, %q", res.IsError, text(res))
				}
				if !strings.HasPrefix(out.CallID, "mcp-") || len(out.CallID) <= len("mcp-") {
					t.Errorf("the plugin saw the call id %q, want one starting with mcp-", out.CallID)
				}
				if prev, ok := seen[out.CallID]; ok {
					t.Errorf("two calls got the same call id %q (%s, then %s)", out.CallID, prev, transport)
				}
				seen[out.CallID] = transport
				ids = append(ids, out.CallID)
			}
			t.Logf("call ids %v", ids)
		})
	}
}
