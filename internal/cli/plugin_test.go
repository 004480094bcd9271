package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestPluginCommand: plugin describe and plugin call on the get_account
// example (built from source), on a plain Extism module with and without
// its sidecar, and their errors.
func TestPluginCommand(t *testing.T) {
	dir := t.TempDir()
	acct := filepath.Join(dir, "get_account.wasm")
	if err := os.WriteFile(acct, plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "plugin", "describe", acct)
	var desc struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &desc) != nil || len(desc.Tools) != 1 || desc.Tools[0].Name != "get_account" {
		t.Fatalf("describe: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "", "plugin", "call", acct, "get_account", `{"account_id":"42"}`)
	if code != 0 || !strings.Contains(out, `"account_id":"42"`) {
		t.Fatalf("call: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown tool", []string{"call", acct, "nope", `{}`}},
		{"bad JSON", []string{"call", acct, "get_account", `{"account_id":`}},
		{"missing file", []string{"describe", filepath.Join(dir, "missing.wasm")}},
		{"not wasm", []string{"describe", filepath.Join(dir, "get_account.json")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(dir, "get_account.json"), []byte("not wasm"), 0o644)
			if code, _, errOut := run(t, "", append([]string{"plugin"}, tc.args...)...); code == 0 || errOut == "" {
				t.Errorf("exit %d, stderr %q: want a failure with a reason", code, errOut)
			}
		})
	}

	// A plain Extism module, called by export with its raw input.
	kit, _ := filepath.Abs("../../pdk/c")
	plain := filepath.Join(dir, "count_vowels.wasm")
	wasm := plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil)
	if err := os.WriteFile(plain, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "", "plugin", "call", plain, "count_vowels", "Hello, plugins")
	if code != 0 || !strings.Contains(out, `"count":4`) {
		t.Fatalf("plain export: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestThirdPartyExtismPlugins: plugins this project did not write, built
// from the examples Extism publishes with its PDKs, with the commands those
// PDKs document, load and answer through plugin call: the ABI is plain
// Extism.
func TestThirdPartyExtismPlugins(t *testing.T) {
	dir := t.TempDir()

	t.Run("as-pdk count_vowels", func(t *testing.T) {
		// @extism/as-pdk 1.0.0 ships example.ts; its Makefile builds it with
		// `asc example.ts --outFile example.wasm --use abort=example/myAbort`.
		kit, _ := filepath.Abs("../../pdk/assemblyscript")
		src := filepath.Join(kit, "node_modules", "@extism", "as-pdk")
		wasm := plugintest.MustBuild(t, plugintest.Build{Kind: "assemblyscript", Dir: src, Sources: []string{"example.ts"},
			NodeModules: kit, Flags: []string{"--use", "abort=example/myAbort"}})
		file := filepath.Join(dir, "as_count_vowels.wasm")
		if err := os.WriteFile(file, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "", "plugin", "describe", file)
		if code != 0 || !strings.Contains(out, `"described": false`) || !strings.Contains(out, `"count_vowels"`) {
			t.Fatalf("describe: exit %d\n%s\n%s", code, out, errOut)
		}
		// The export itself, with its raw input. It sets and reads an
		// Extism var and reads a config key the host does not set.
		code, out, errOut = run(t, "", "plugin", "call", file, "count_vowels", "Hello, World!")
		if code != 0 || strings.TrimSpace(out) != `{"count": 3, "config": "null", "a": "this is var a"}` {
			t.Fatalf("call: exit %d\n%s\n%s", code, out, errOut)
		}
		// As a tool, through the sidecar of this project's count_vowels
		// example (the same export, the input's "text" as its raw input).
		side, err := os.ReadFile("../../examples/plugins/count_vowels/count_vowels.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "as_count_vowels.json"), side, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = run(t, "", "plugin", "call", file, "count_vowels", `{"text":"agentic host"}`)
		if code != 0 || !strings.Contains(out, `"count": 4`) {
			t.Fatalf("tool call: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("go-pdk countvowels", func(t *testing.T) {
		// github.com/extism/go-pdk v1.1.3 ships example/countvowels; its
		// Makefile builds the standard-Go variant with
		// `GOOS=wasip1 GOARCH=wasm go build -tags std`: a WASI command whose
		// _start runs each of the example's functions.
		wasm := goPDKExample(t, dir, "countvowels")
		file := filepath.Join(dir, "std_countvowels.wasm")
		if err := os.WriteFile(file, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "", "plugin", "call", file, "_start", `{"input":"this is a test"}`)
		if code != 0 || strings.TrimSpace(out) != "JSON roundtrip: a === b" {
			t.Fatalf("call: exit %d\n%s\n%s", code, out, errOut)
		}
		// Its typed step decodes the input as JSON: a plugin error, reported.
		code, _, errOut = run(t, "", "plugin", "call", file, "_start", "this is a test")
		if code == 0 || !strings.Contains(errOut, "invalid character") {
			t.Fatalf("bad input: exit %d, stderr %q", code, errOut)
		}
	})
}

// goPDKExample builds an example of github.com/extism/go-pdk v1.1.3 (the
// version this project's kit uses), from the module proxy's copy, the way
// the module's own Makefile does.
func goPDKExample(t *testing.T, dir, name string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	dl := exec.Command("go", "mod", "download", "-json", "github.com/extism/go-pdk@v1.1.3")
	dl.Dir = "../../pdk"
	dl.Env = append(os.Environ(), "GOWORK=off")
	raw, err := dl.Output()
	if err != nil {
		t.Fatalf("go mod download github.com/extism/go-pdk@v1.1.3: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(raw, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v\n%s", err, raw)
	}
	// The module cache is read-only and the module's go.work names a
	// directory it does not ship: build from a copy, outside any workspace.
	src := filepath.Join(dir, "go-pdk")
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".wasm")
	build := exec.Command("go", "build", "-tags", "std", "-o", out, "./example/"+name)
	build.Dir = src
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(build.Args, " "), err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// TestChatPluginSandbox: the --plugin-* flags open the sandbox of the
// --plugins: publish_post reaches the blog it is configured for and keeps
// its idempotency record in the key-value store, in the --storage
// directory; plugin call --kv --storage does the same from the shell.
func TestChatPluginSandbox(t *testing.T) {
	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"post-1","url":"https://blog.example/p/1"}`)
	}))
	defer blog.Close()
	u, _ := url.Parse(blog.URL)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "publish_post.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/publish_post"), 0o644); err != nil {
		t.Fatal(err)
	}
	storeDir := t.TempDir()
	// --approve: this test is about the sandbox; it publishes unattended.
	sandbox := []string{"--plugin-allow-host", u.Host, "--plugin-allow-private", "--plugin-config", "publish_post:endpoint=" + blog.URL + "/api/posts",
		"--approve", "publish_post"}
	chat := func(session string, extra ...string) (int, string, string) {
		args := append([]string{"chat", "--offline", "--plugins", dir, "--storage", "file:" + storeDir, "--session", session}, sandbox...)
		args = append(args, extra...)
		return run(t, "", append(args, `publish_post title="Hello" body="First"`)...)
	}

	code, out, errOut := chat("p1", "--plugin-kv")
	if code != 0 || !strings.Contains(out, `"status":"published"`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the blog got %d posts, want 1", n)
	}
	ns := sha256.Sum256([]byte(plugins.StorageNamespace + "default"))
	if files, _ := filepath.Glob(filepath.Join(storeDir, "kv", hex.EncodeToString(ns[:]), "*")); len(files) != 1 {
		t.Errorf("the plugins' value files in the storage directory: %q, want the idempotency record", files)
	}

	// Without --plugin-kv the plugin cannot keep its record: it refuses to
	// publish, and says why to the model.
	code, out, errOut = chat("p2")
	if code != 0 || !strings.Contains(out, "key-value store is not enabled") || posts.Load() != 1 {
		t.Fatalf("without --plugin-kv: exit %d, %d posts\n%s\n%s", code, posts.Load(), out, errOut)
	}

	// --plugin-grant: once a grant is given, a plugin gets only its own.
	// Granted another plugin alone, publish_post gets no store and no
	// HTTP; granted them, it publishes; a grant beyond the sandbox is a
	// usage error.
	code, out, errOut = chat("g1", "--plugin-kv", "--plugin-grant", "other=kv")
	if code != 0 || !strings.Contains(out, "key-value store is not enabled for this plugin") || posts.Load() != 1 {
		t.Fatalf("publish_post not granted: exit %d, %d posts\n%s\n%s", code, posts.Load(), out, errOut)
	}
	code, out, errOut = chat("g2", "--plugin-kv", "--plugin-grant", "publish_post="+u.Host+",kv,private")
	if code != 0 || !strings.Contains(out, `"status":"published"`) || posts.Load() != 2 {
		t.Fatalf("publish_post granted: exit %d, %d posts\n%s\n%s", code, posts.Load(), out, errOut)
	}
	if code, _, errOut := chat("g3", "--plugin-kv", "--plugin-grant", "publish_post=evil.example.org"); code != 2 ||
		!strings.Contains(errOut, `granted host "evil.example.org" is not among the tenant's allowed hosts`) {
		t.Errorf("a grant beyond the sandbox: exit %d %s", code, errOut)
	}

	// plugin call keeps its --kv store in --storage too: the second call
	// with the same call id, another process, finds the record.
	wasmFile := filepath.Join(dir, "publish_post.wasm")
	for i, want := range []string{`"status":"published"`, `"replayed":true`} {
		// (A cold compile of a Go plugin on a loaded machine under -race
		// can pass the default bound: give it room.)
		code, out, errOut := run(t, "", "plugin", "call", "--compile-timeout", "5m", "--kv", "--storage", "file:"+storeDir, "--allow-host", u.Host, "--allow-private",
			"--config", "endpoint="+blog.URL+"/api/posts", "--call-id", "shell-1", wasmFile, "publish_post", `{"title":"Hi","body":"Shell"}`)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("plugin call %d: exit %d\n%s\n%s", i+1, code, out, errOut)
		}
	}
	if n := posts.Load(); n != 3 {
		t.Fatalf("the blog got %d posts, want 3 (one by chat, one by the granted chat, one by plugin call)", n)
	}
	if code, _, errOut := run(t, "", "plugin", "call", "--storage", "memory:", wasmFile, "publish_post", `{}`); code != 2 || !strings.Contains(errOut, "--kv") {
		t.Errorf("--storage without --kv: exit %d, %q", code, errOut)
	}

	for _, args := range [][]string{
		{"chat", "--storage", "memory:", "--plugin-kv", "hi"},
		{"chat", "--storage", "memory:", "--plugins", dir, "--plugin-config", "endpoint=x", "hi"},
		{"chat", "--storage", "memory:", "--plugins", dir, "--plugin-allow-host", "http://x", "hi"},
	} {
		if code, _, errOut := run(t, "", args...); code != 2 || !strings.Contains(errOut, "--plugin") {
			t.Errorf("%q: exit %d, %q; want 2 and a reason", args, code, errOut)
		}
	}
}

// TestPluginCommandsHostileModules: the plugin commands and chat stay
// within their deadlines on modules built to hang or exhaust loading — a
// start function that never returns, a compile bomb — and a directory
// holding them (and an impostor squatting a tool name) is listed with
// every refusal and conflict, while chat starts within seconds and uses
// the healthy plugin.
func TestPluginCommandsHostileModules(t *testing.T) {
	dir := t.TempDir()
	kit, _ := filepath.Abs("../../pdk/c")
	vowels := plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil)
	sidecar, err := os.ReadFile("../../examples/plugins/count_vowels/count_vowels.json")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"startloop.wasm":    plugintest.StartLoop(),
		"bomb.wasm":         plugintest.NestedBlocks(100_000),
		"count_vowels.wasm": vowels,
		"count_vowels.json": sidecar,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	timed := func(what string, guard time.Duration, args ...string) (int, string, string) {
		t.Helper()
		start := time.Now()
		code, out, errOut := run(t, "", args...)
		if took := time.Since(start); took > guard {
			t.Errorf("%s took %s (a guard against a hang: %s)", what, took, guard)
		}
		return code, out, errOut
	}

	code, _, errOut := timed("describe of a start-function loop", time.Minute, "plugin", "describe", "--cache-dir", "", "--timeout", "1s", filepath.Join(dir, "startloop.wasm"))
	if code != 1 || !strings.Contains(errOut, "instantiating: timed out after 1s") {
		t.Errorf("describe startloop: exit %d, %q", code, errOut)
	}
	// A compile bomb is stopped by whichever bound it reaches first: its
	// 2s, or the compile's memory (Limits.MaxCompileBytes), which a fast
	// machine reaches in about 2s.
	bombRefused := func(s string) bool {
		return strings.Contains(s, "did not finish compiling within 2s") || strings.Contains(s, "needed more than 1024 MiB (Limits.MaxCompileBytes)")
	}
	code, _, errOut = timed("describe of a compile bomb", time.Minute, "plugin", "describe", "--cache-dir", "", "--compile-timeout", "2s", filepath.Join(dir, "bomb.wasm"))
	if code != 1 || !bombRefused(errOut) {
		t.Errorf("describe bomb: exit %d, %q", code, errOut)
	}

	// plugin call on the hostile C plugins: each misbehaviour a clear error
	// within its deadline, whatever it floods.
	bombsDir := t.TempDir()
	bombs := filepath.Join(bombsDir, "bombs.wasm")
	os.WriteFile(bombs, plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"bombs.c", kit + "/agentic.c"}, []string{kit}, nil), 0o644)
	liar := filepath.Join(bombsDir, "liar.wasm")
	os.WriteFile(liar, plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"liar.c"}, []string{kit}, []string{"-DLIE_EXPLODE"}), 0o644)
	deep := strings.Repeat(`{"a":`, 22) + "1" + strings.Repeat("}", 22)
	// The misbehaviours that end on their own get a timeout a loaded
	// machine (and the race detector) cannot reach; the spin gets 1s.
	for _, tc := range []struct {
		file, tool, input, timeout, want string
	}{
		{bombs, "recurse", "{}", "2m", "stack overflow"},
		{bombs, "error_bomb", "{}", "2m", "more bytes cut"},
		// A busy loop ends at its timeout or when it has spent the
		// default fuel (Limits.Fuel, about a second of spinning),
		// whichever comes first on the machine.
		{bombs, "spin", "{}", "1s", "timed out after 1s|ran out of fuel"},
		{liar, "t", deep, "2m", "too complex to check"},
	} {
		code, _, errOut := timed("plugin call "+tc.tool, 3*time.Minute, "plugin", "call", "--cache-dir", "", "--timeout", tc.timeout, tc.file, tc.tool, tc.input)
		if code != 1 || !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(errOut, w) }) || len(errOut) > 8<<10 {
			t.Errorf("plugin call %s: exit %d, %d bytes on stderr, want %q: %.300s", tc.tool, code, len(errOut), tc.want, errOut)
		}
	}
	code, _, errOut = timed("plugin call log_empty", 3*time.Minute, "plugin", "call", "--cache-dir", "", "--timeout", "2m", bombs, "log_empty")
	if code != 0 || strings.Count(errOut, "\n") > 300 {
		t.Errorf("plugin call log_empty: exit %d, %d lines on stderr", code, strings.Count(errOut, "\n"))
	}

	store := "file:" + t.TempDir()
	code, out, errOut := timed("chat with hostile modules in --plugins", 2*time.Minute,
		"chat", "--offline", "--plugins", dir, "--plugin-compile-timeout", "2s", "--storage", store, "--session", "h", "count_vowels text=Hello")
	if code != 0 || !strings.Contains(out, "[tool count_vowels") || !strings.Contains(out, `"count":2`) {
		t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
	}

	// An impostor claims count_vowels: neither serves it, and the listing
	// says so, with the refusals.
	if err := os.WriteFile(filepath.Join(dir, "aaa.wasm"), vowels, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aaa.json"), sidecar, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = timed("plugin list", 2*time.Minute, "plugin", "list", "--compile-timeout", "2s", "--plugins", dir)
	for _, want := range []string{"count_vowels", "aaa", "tool count_vowels: offered by aaa and count_vowels",
		"bomb", "startloop"} {
		if !strings.Contains(out, want) {
			t.Errorf("plugin list does not say %q", want)
		}
	}
	// The start function's loop is a call: its deadline (5 s) or its fuel
	// stops it, whichever comes first on the machine.
	if !strings.Contains(out, "instantiating: timed out") && !strings.Contains(out, "the start function used 10000000000 fuel") {
		t.Error("plugin list does not say the start function timed out or ran out of fuel")
	}
	if !bombRefused(out) {
		t.Error("plugin list does not say why bomb was refused")
	}
	if code != 1 || !strings.Contains(errOut, "2 refused, 1 in conflict") {
		t.Errorf("plugin list: exit %d, %q", code, errOut)
	}
	if t.Failed() {
		t.Logf("plugin list:\n%s\n%s", out, errOut)
	}
	code, out, _ = run(t, "", "plugin", "list", "--json", "--compile-timeout", "2s", "--plugins", dir)
	var listing struct {
		Conflicts []struct{ Kind, Name string }  `json:"conflicts"`
		Refusals  []struct{ Name, Error string } `json:"refusals"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil || len(listing.Conflicts) != 1 || len(listing.Refusals) != 2 {
		t.Errorf("plugin list --json: exit %d, %v\n%s", code, err, out)
	}
}

// TestPluginDescribeNeeds: plugin describe shows what a module says it
// needs and what it would be granted — the sandbox flags narrowed to its
// needs — and refuses it, naming the host, where the flags grant less.
func TestPluginDescribeNeeds(t *testing.T) {
	kit := cKitDir(t)
	file := filepath.Join(t.TempDir(), "w.wasm")
	wasm := plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"widen.c", kit + "/agentic.c"}, []string{kit},
		[]string{"-DFETCH", `-DNEEDS="{\"allowed_hosts\":[\"127.0.0.1\"],\"allow_private_network\":true}"`})
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "plugin", "describe", "--allow-host", "127.0.0.1", "--allow-host", "localhost", "--allow-private", "--kv", file)
	var desc struct {
		Needs *struct {
			AllowedHosts []string `json:"allowed_hosts"`
		} `json:"needs"`
		Grants struct {
			AllowedHosts        []string `json:"allowed_hosts"`
			AllowPrivateNetwork bool     `json:"allow_private_network"`
			KV                  bool     `json:"kv"`
		} `json:"grants"`
		Fingerprint string `json:"fingerprint"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &desc) != nil || desc.Needs == nil || !slices.Equal(desc.Needs.AllowedHosts, []string{"127.0.0.1"}) ||
		!slices.Equal(desc.Grants.AllowedHosts, []string{"127.0.0.1"}) || !desc.Grants.AllowPrivateNetwork || desc.Grants.KV || desc.Fingerprint == "" {
		t.Fatalf("describe: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = run(t, "", "plugin", "describe", file)
	if code != 1 || !strings.Contains(errOut, `it needs host "127.0.0.1", which it is not granted`) {
		t.Errorf("describe without the sandbox it needs: exit %d, %s", code, errOut)
	}
}
