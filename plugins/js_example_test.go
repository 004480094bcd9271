package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestExampleTSWeather: the TypeScript example asks the granted weather
// service once and answers the same question from its cache after, through
// a registry as serve's tenants get it.
func TestExampleTSWeather(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		q := r.URL.Query()
		if r.URL.Path != "/v1/forecast" || q.Get("current") != "temperature_2m,wind_speed_10m" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if q.Get("latitude") == "0" {
			http.Error(w, "no weather at sea", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"current":{"time":"2026-12-06T14:00","temperature_2m":7.5,"wind_speed_10m":12.1}}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, logs := newRuntime(t)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits {
			return plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}
		},
		Config: func(string, string) map[string]string { return map[string]string{"endpoint": srv.URL + "/v1/forecast"} },
	})
	defer reg.Close(context.Background())
	wasm := plugintest.TypeScriptPlugin(t, "../examples/plugins/ts_weather", "ts_weather.ts", "../../../pdk/ts")
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "ts_weather", Wasm: wasm}); err != nil {
		t.Fatal(err)
	}
	tool, ok := reg.Tool("acme", "weather")
	if !ok {
		t.Fatal("no weather tool")
	}
	if s := tool.Spec(); s.Effect != host.EffectRead || !s.Idempotent {
		t.Fatalf("spec %+v", s)
	}
	call := func(input string) (map[string]any, error) {
		res, err := tool.Call(context.Background(), host.ToolCall{ID: "c", SessionID: "s", Input: json.RawMessage(input)})
		if err != nil {
			return nil, err
		}
		var out map[string]any
		return out, json.Unmarshal([]byte(res.Output), &out)
	}
	first, err := call(`{"city":"Paris","latitude":48.85,"longitude":2.35}`)
	if err != nil || first["temperature_c"] != 7.5 || first["cached"] != false || first["city"] != "Paris" {
		t.Fatalf("first: %v, %v", first, err)
	}
	again, err := call(`{"city":"Paris, France","latitude":48.85,"longitude":2.35}`)
	if err != nil || again["cached"] != true || again["city"] != "Paris, France" || hits.Load() != 1 {
		t.Fatalf("again: %v, %v; %d requests, want the cache to answer", again, err, hits.Load())
	}
	if _, err := call(`{"city":"Null Island","latitude":0,"longitude":0}`); !errors.Is(err, plugins.ErrToolFailed) ||
		!strings.Contains(err.Error(), "answered 503") {
		t.Errorf("a failing service: %v", err)
	}
	if _, err := call(`{"city":"Paris","latitude":91,"longitude":0}`); !errors.Is(err, plugins.ErrInvalidInput) {
		t.Errorf("a latitude out of range: %v", err)
	}
	if !strings.Contains(logs.String(), "weather for Paris: 7.5 °C") {
		t.Errorf("the plugin's log line is missing:\n%s", logs.String())
	}
}
