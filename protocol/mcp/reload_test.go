package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// changes counts a client's notifications/tools/list_changed.
type changes chan struct{}

func (c changes) options() *sdk.ClientOptions {
	return &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		select {
		case c <- struct{}{}:
		default:
		}
	}}
}

// await waits for list_changed notifications until the listed tools
// satisfy ok (a guard of a minute against a hang).
func (c changes) await(t *testing.T, cs *sdk.ClientSession, what string, ok func(map[string]*sdk.Tool) bool) map[string]*sdk.Tool {
	t.Helper()
	guard := time.After(time.Minute)
	for {
		select {
		case <-c:
			if tools := listTools(t, cs); ok(tools) {
				return tools
			}
		case <-guard:
			t.Fatalf("no notifications/tools/list_changed for %s (a guard against a hang); listed: %v", what, keys(listTools(t, cs)))
		}
	}
}

func keys(m map[string]*sdk.Tool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHotReload: adding, replacing and removing a plugin's file sends
// notifications/tools/list_changed to connected clients, over both
// transports, and the list follows (each tool naming its module version).
// A call in flight during a swap finishes on the version it started on;
// that version shuts down after it, and the next call runs on the new one.
//
// The new version is compiled into the cache before the call starts: a
// compile the cache has not seen can outlast the call's HTTP request on a
// loaded machine (the call would end before the swap), or the compile
// timeout (the new version refused, the old one kept: no list_changed).
// Each wait fails with the registry's reason, and the site is released
// when the test ends however it ends, so that a failure never hangs.
func TestHotReload(t *testing.T) {
	hostile := hostileWasm(t)
	stats := textStatsWasm(t)
	for i, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			entered, release := make(chan struct{}, 1), make(chan struct{})
			slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case entered <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
				fmt.Fprint(w, "answered")
			}))
			t.Cleanup(slow.Close)
			u, _ := url.Parse(slow.URL)
			// The call waits for the site as long as the test needs
			// (HTTPTimeout and CallTimeout); a compile may take long.
			limits := plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
				CallTimeout: 2 * time.Minute, HTTPTimeout: 2 * time.Minute, CompileTimeout: 5 * time.Minute}

			e := newEnv(t, map[string][]byte{"hostile.wasm": hostile}, limits, mcp.Options{Approve: []string{"fetch"}})
			ch := make(changes, 1)
			cs := e.connect(t, transport, "watcher", ch.options())
			// Registered after the client's cleanups, so run before them:
			// the call in flight ends before the session closes.
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			if tools := listTools(t, cs); tools["fetch"] == nil || tools["text_stats"] != nil {
				t.Fatalf("listed %v", keys(tools))
			}

			writeAtomic(t, e.dir, "text_stats.wasm", stats)
			e.awaitChange(t, plugins.Loaded, "text_stats")
			ch.await(t, cs, "a new plugin", func(m map[string]*sdk.Tool) bool { return m["text_stats"] != nil })

			// A call in flight (the plugin waits for the slow site), then
			// a new version of its module (other bytes, same tools).
			v2 := withCustomSection(hostile, fmt.Sprintf("v%d", i+2))
			e.precompile(t, v2, limits)
			old, _ := e.reg.Module("acme", "hostile")
			result := make(chan *sdk.CallToolResult, 1)
			go func() {
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": slow.URL, "method": "GET"}})
				if err != nil {
					res = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
				}
				result <- res
			}()
			select {
			case <-entered:
			case res := <-result:
				t.Fatalf("the call ended before it reached the site: %s", text(res))
			case <-time.After(time.Minute):
				t.Fatal("the call did not reach the site (a guard against a hang)")
			}
			writeAtomic(t, e.dir, "hostile.wasm", v2)
			e.awaitChange(t, plugins.Replaced, "hostile")
			tools := ch.await(t, cs, "a replaced plugin", func(m map[string]*sdk.Tool) bool {
				return m["fetch"] != nil && m["fetch"].Meta[mcp.MetaModule] == hashOf(v2)
			})
			if tools["ok"].Meta[mcp.MetaModule] != hashOf(v2) {
				t.Errorf("ok is listed from %v, want the new version", tools["ok"].Meta[mcp.MetaModule])
			}
			select {
			case <-old.Done():
				t.Error("the old version shut down with a call in flight")
			default:
			}
			once.Do(func() { close(release) })
			var res *sdk.CallToolResult
			select {
			case res = <-result:
			case <-time.After(time.Minute):
				t.Fatal("the call in flight did not end once the site answered (a guard against a hang)")
			}
			if res.IsError || meta(res, mcp.MetaModule) != hashOf(hostile) {
				t.Errorf("the call in flight: %q from %s, want an answer from the old version %s", text(res), meta(res, mcp.MetaModule), hashOf(hostile))
			}
			select {
			case <-old.Done():
			case <-time.After(time.Minute):
				t.Error("the old version did not shut down after its last call (a guard against a hang)")
			}
			if res := call(t, cs, "ok", nil); meta(res, mcp.MetaModule) != hashOf(v2) {
				t.Errorf("a new call ran on %s, want the new version", meta(res, mcp.MetaModule))
			}

			if err := os.Remove(filepath.Join(e.dir, "text_stats.wasm")); err != nil {
				t.Fatal(err)
			}
			e.awaitChange(t, plugins.Removed, "text_stats")
			ch.await(t, cs, "a removed plugin", func(m map[string]*sdk.Tool) bool { return m["text_stats"] == nil })
			if res := call(t, cs, "ok", nil); res.IsError {
				t.Errorf("after the removal: %s", text(res))
			}
		})
	}
}

// TestRefusalIsQuiet: a change of the registry that changes nothing a
// client sees (a module refused: the registry serves what it served)
// sends no list_changed; a name two modules offer is withdrawn from the
// list, and calling it is an error.
func TestRefusalIsQuiet(t *testing.T) {
	wasm := getAccountWasm(t)
	e := newEnv(t, map[string][]byte{"get_account.wasm": wasm, "text_stats.wasm": textStatsWasm(t)}, plugins.Limits{}, mcp.Options{})
	ch := make(changes, 8)
	cs := e.connect(t, "stdio", "watcher", ch.options())
	listTools(t, cs)
	// A notification of the initial loads may still be on its way (the
	// SDK sends it 10ms after the change, later on a loaded machine): it
	// is not the refusal's. Wait for the line to be quiet.
	for quiet := false; !quiet; {
		select {
		case <-ch:
		case <-time.After(300 * time.Millisecond):
			quiet = true
		}
	}

	writeAtomic(t, e.dir, "broken.wasm", []byte("not a module"))
	e.awaitChange(t, plugins.Rejected, "broken")
	// The SDK sends a notification 10ms after a change: wait well past
	// that for one that must not come (correct code cannot fail this).
	select {
	case <-ch:
		t.Error("list_changed after a refusal, which changed no tool")
	case <-time.After(time.Second):
	}
	// The same bytes under another name: get_account is offered twice,
	// and neither module serves it.
	writeAtomic(t, e.dir, "second.wasm", wasm)
	e.awaitChange(t, plugins.Loaded, "second")
	tools := ch.await(t, cs, "a conflict", func(m map[string]*sdk.Tool) bool { return m["get_account"] == nil })
	if len(tools) != 1 || tools["text_stats"] == nil {
		t.Errorf("listed %v, want text_stats alone", keys(tools))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "get_account", Arguments: map[string]any{"account_id": "1"}})
	if err == nil && !res.IsError {
		t.Errorf("a withdrawn tool answered: %s", text(res))
	}
}
