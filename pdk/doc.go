// Package pdk is the Go plugin development kit for agentic-host: it turns a
// Go package built for WebAssembly into a plugin that offers tools,
// deliverable validators and approval policies to the host.
//
// A plugin registers its handlers in init functions and has an empty main;
// the kit provides the plugin's exports (describe, call, validate, decide)
// and the JSON envelope around them:
//
//	package main
//
//	import "github.com/agentichost/agentic/pdk"
//
//	type input struct {
//		AccountID string `json:"account_id"`
//	}
//
//	func init() {
//		pdk.RegisterTool(pdk.Tool{
//			Name:        "get_account",
//			Description: "Look up a customer account by its id.",
//			InputSchema: `{"type":"object","properties":{"account_id":{"type":"string"}},"required":["account_id"]}`,
//			Effect:      pdk.Read,
//		}, func(c pdk.Call, in input) (map[string]any, error) {
//			return map[string]any{"account_id": in.AccountID, "plan": "pro"}, nil
//		})
//	}
//
//	func main() {}
//
// Build it with standard Go (1.24 or later):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// # Host functions
//
// Inside the sandbox a plugin has no filesystem, no environment and no
// sockets. The host offers instead: [Log] (to the host's log, tagged with
// the plugin and tenant), a key-value store scoped to the tenant ([KVGet],
// [KVSet], [KVDelete]) and HTTP to the hosts the tenant allows ([Fetch]).
// Each is subject to the tenant's limits and returns an error when denied.
// A plugin that says what it needs ([Need]) runs with that and no more:
//
//	pdk.Need(pdk.Needs{AllowedHosts: []string{"accounts.example.com"}, KV: true})
//
// # Testing without Wasm
//
// The kit also builds for the machine's own GOOS/GOARCH, where [Dispatch]
// runs an export in-process and the host functions use [TestHost]. Plugin
// authors can so test their handlers with plain go test, then run the built
// module in the real host with the plugintest helpers of
// github.com/agentichost/agentic/plugins/plugintest.
//
// # The wire
//
// The JSON exchanged with the host is described in docs/plugins.md of the
// agentic-host repository; [ABIVersion] is the version this kit speaks.
package pdk
