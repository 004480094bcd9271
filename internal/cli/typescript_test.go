//go:build unix

package cli_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// weatherSite is a weather service for the ts_weather example: it wants
// the bearer secret, answers the current conditions, and a 503 quoting the
// credential it got for latitude 0.
func weatherSite(t *testing.T, secret string) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		auth := r.Header.Get("Authorization")
		if secret != "" && auth != "Bearer "+secret {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		if r.URL.Query().Get("latitude") == "0" {
			http.Error(w, "no weather at sea for "+auth, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"current":{"time":"2026-12-06T14:00","temperature_2m":7.5,"wind_speed_10m":12.1}}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// tsWeatherVariant builds the ts_weather example edited by edit: another
// version of the plugin.
func tsWeatherVariant(t *testing.T, edit func(string) string) []byte {
	t.Helper()
	src, err := os.ReadFile("../../examples/plugins/ts_weather/ts_weather.ts")
	if err != nil {
		t.Fatal(err)
	}
	kit, _ := filepath.Abs("../../pdk/ts")
	text := strings.ReplaceAll(string(src), "../../../pdk/ts/agentic", filepath.ToSlash(filepath.Join(kit, "agentic")))
	text = edit(text)
	dir := filepath.Join(t.TempDir(), "ts_weather")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "ts_weather.ts"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return plugintest.TypeScriptPlugin(t, dir, "ts_weather.ts", kit)
}

// TestTypeScriptTool: the TypeScript example is a tool like any other
// plugin's, through each way the host offers one: chat's model calls it
// (key-value cache, granted host), serve's does with a secret it never
// sees, and picks up a new version dropped into the directory, and an MCP
// client calls it.
func TestTypeScriptTool(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil && os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") != "1" {
		t.Skip("node is not installed")
	}
	bin := needBinary(t)
	wasm := plugintest.TypeScriptPlugin(t, "../../examples/plugins/ts_weather", "ts_weather.ts", "../../../pdk/ts")
	const ask = "Please weather city=Paris latitude=48.85 longitude=2.35"

	t.Run("chat", func(t *testing.T) {
		site, hits := weatherSite(t, "")
		u, _ := url.Parse(site.URL)
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "ts_weather.wasm"), wasm, 0o644)
		store := "file:" + t.TempDir()
		for i := range 2 {
			code, out, errOut := runBin(t, bin, "chat", "--offline", "--plugins", dir, "--storage", store, "--session", fmt.Sprint("w", i),
				"--plugin-kv", "--plugin-allow-host", u.Host, "--plugin-allow-private",
				"--plugin-config", "ts_weather:endpoint="+site.URL+"/v1/forecast", ask)
			if code != 0 || !strings.Contains(out, `"temperature_c":7.5`) || !strings.Contains(out, fmt.Sprintf(`"cached":%v`, i == 1)) {
				t.Fatalf("chat %d: exit %d\n%s\n%s", i+1, code, out, errOut)
			}
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("the weather service was asked %d times, want once (then the cache)", n)
		}
	})

	t.Run("serve", func(t *testing.T) {
		const secret = "s3cret-weather-7d1e"
		site, _ := weatherSite(t, secret)
		u, _ := url.Parse(site.URL)
		plugins := t.TempDir()
		os.MkdirAll(filepath.Join(plugins, "acme"), 0o755)
		os.WriteFile(filepath.Join(plugins, "acme", "ts_weather.wasm"), wasm, 0o644)
		model, err := fakemodel.Start(fakemodel.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer model.Close()
		config := writeServeConfig(t, "file:"+t.TempDir(), model.URL(), fmt.Sprintf(`    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
      kv: true
      secrets:
        - {plugin: ts_weather, host: %q, scheme: bearer, value: %q}
    plugin_config:
      ts_weather: {endpoint: %q}
plugins_dir: %s
`, u.Host, u.Host, secret, site.URL+"/v1/forecast", plugins))
		s := startServe(t, "serve", bin, config)
		s.post("w1", ask)
		s.waitState("w1", "completed", 2*time.Minute)
		body := s.must("GET", "/v1/sessions/w1/transcript", "", http.StatusOK, nil)
		if !strings.Contains(body, `temperature_c\":7.5`) {
			t.Fatalf("the transcript has no answer of the tool: %s", body)
		}
		s.post("w2", "Please weather city=Nowhere latitude=0 longitude=0")
		s.waitState("w2", "completed", 2*time.Minute)
		body = s.must("GET", "/v1/sessions/w2/transcript", "", http.StatusOK, nil)
		if !strings.Contains(body, "answered 503") || strings.Contains(body, secret) {
			t.Fatalf("the failed call's transcript (want the 503, never the secret): %s", body)
		}

		// A new version dropped into the directory serves the next call.
		next := filepath.Join(plugins, "acme", "ts_weather.wasm")
		os.WriteFile(next+".tmp", tsWeatherVariant(t, func(src string) string { return strings.ReplaceAll(src, "temperature_c", "celsius") }), 0o644)
		if err := os.Rename(next+".tmp", next); err != nil {
			t.Fatal(err)
		}
		// The reload is logged once the new version serves (a guard
		// against a hang, not a speed check).
		for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(s.err.String(), "plugin replaced"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the new version was never loaded")
			}
		}
		s.post("w3", "Please weather city=Lyon latitude=45.76 longitude=4.84")
		s.waitState("w3", "completed", 2*time.Minute)
		body = s.must("GET", "/v1/sessions/w3/transcript", "", http.StatusOK, nil)
		if !strings.Contains(body, `celsius\":7.5`) {
			t.Fatalf("the new version did not serve the call after its reload: %s", body)
		}

		// An upload that adds a tool with an external effect is held for a
		// person; approved, it serves.
		widened := tsWeatherVariant(t, func(src string) string {
			return src + `
tool({ name: "forecast", description: "Books a forecast.", effect: "external", execute: () => "booked" });
`
		})
		var held struct {
			Held struct{ Hash string } `json:"held"`
		}
		s.must("PUT", "/v1/plugins/ts_weather", string(widened), http.StatusAccepted, &held)
		env := []string{"AGENTIC_SERVER=" + s.url, "AGENTIC_API_KEY=" + serveKey}
		if code, out, errOut := runBinEnv(t, bin, env, "plugin", "held"); code != 0 || !strings.Contains(out, "tool forecast: new") {
			t.Fatalf("plugin held: exit %d\n%s%s", code, out, errOut)
		}
		if code, out, errOut := runBinEnv(t, bin, env, "plugin", "approve", "ts_weather", held.Held.Hash); code != 0 || !strings.Contains(out, "loaded ts_weather "+held.Held.Hash) {
			t.Fatalf("plugin approve: exit %d\n%s%s", code, out, errOut)
		}
		if body := s.must("GET", "/v1/plugins/ts_weather", "", http.StatusOK, nil); !strings.Contains(body, `"forecast"`) {
			t.Errorf("after the approval: %s", body)
		}

		// A TypeScript plugin that keeps running past its time is
		// quarantined like any (serve's default: five failures).
		s.must("PUT", "/v1/plugins/hostile_js", string(plugintest.TypeScriptPlugin(t, "../../plugins/testdata/js", "hostile.ts", "../../../pdk/ts")), http.StatusCreated, nil)
		// (The upload is loaded, then loaded again when the directory's
		// watcher sees its file: a failure of a call still running on the
		// first load counts too.)
		for i := range 5 {
			s.must("POST", fmt.Sprintf("/v1/sessions/spin%d/messages?wait=true", i), `{"text":"Please spin"}`, http.StatusOK, nil)
		}
		if body := s.must("GET", "/v1/plugins", "", http.StatusOK, nil); !strings.Contains(body, `"quarantined":[{"name":"hostile_js"`) {
			var calls strings.Builder
			for i := range 5 {
				fmt.Fprintf(&calls, "spin%d: %s\n", i, s.must("GET", fmt.Sprintf("/v1/sessions/spin%d/transcript", i), "", http.StatusOK, nil))
			}
			t.Fatalf("after five timeouts: %s\nthe calls:\n%s\nserve's log:\n%s", body, calls.String(), s.err.String())
		}
	})

	t.Run("mcp", func(t *testing.T) {
		site, _ := weatherSite(t, "")
		u, _ := url.Parse(site.URL)
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "ts_weather.wasm"), wasm, 0o644)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var stderr lockedBuffer
		cmd := exec.Command(bin, "mcp", "--plugins", dir, "--kv", "--allow-host", u.Host, "--allow-private",
			"--config", "ts_weather:endpoint="+site.URL+"/v1/forecast")
		cmd.Stderr = &stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "ts-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "weather", Arguments: map[string]any{"city": "Paris", "latitude": 48.85, "longitude": 2.35}})
		if err != nil || res.IsError || len(res.Content) == 0 {
			t.Fatalf("call: %+v, %v\n%s", res, err, stderr.String())
		}
		if text, _ := res.Content[0].(*mcp.TextContent); text == nil || !strings.Contains(text.Text, `"temperature_c":7.5`) {
			t.Fatalf("call answered %+v", res.Content[0])
		}
	})
}
