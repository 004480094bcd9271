package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/cli"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/archive"
	"github.com/agentichost/agentic/storage/file"
)

// Tests of promises the README and docs/*.md make about the commands'
// flags, each named after the flag it checks.

// TestStorageFsyncOption: --storage file:DIR?fsync=1 (or fsync=true) is a
// file store in DIR that fsyncs every append — the option turns the
// store's Fsync on and is not part of the directory's name; a chat keeps
// its session there and the transcript reads it back. An option the
// store does not know is refused with an error naming it and the one it
// knows, before anything is written.
func TestStorageFsyncOption(t *testing.T) {
	fsyncOf := func(t *testing.T, url string) bool {
		t.Helper()
		st, closeStore, err := cli.OpenStorage(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		defer closeStore()
		fs, ok := st.(*file.Store)
		if !ok {
			t.Fatalf("%s opens a %T, want a *file.Store", url, st)
		}
		return fs.Fsync()
	}
	if fsyncOf(t, "file:"+t.TempDir()) {
		t.Error("file:DIR fsyncs; want fsync only with ?fsync=1")
	}
	for _, opt := range []string{"fsync=1", "fsync=true"} {
		t.Run(opt, func(t *testing.T) {
			dir := t.TempDir()
			store := "file:" + dir + "?" + opt
			if !fsyncOf(t, store) {
				t.Errorf("%s: the store does not fsync", store)
			}
			code, out, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "f", "hello")
			if code != 0 || !strings.Contains(out, "You said: hello") {
				t.Fatalf("chat --storage %s: exit %d\n%s\n%s", store, code, out, errOut)
			}
			if _, err := os.Stat(filepath.Join(dir, "f.jsonl")); err != nil {
				t.Errorf("the session is not in %s: %v", dir, err)
			}
			if tr := transcriptOf(t, store, "f"); len(tr.Items) != 2 || tr.Items[1].Status != "completed" {
				t.Errorf("transcript --storage %s: %+v", store, tr)
			}
		})
	}
	for _, opt := range []string{"fsync=yes", "sync=1", "fsync=1&x=2"} {
		dir := filepath.Join(t.TempDir(), "store")
		store := "file:" + dir + "?" + opt
		code, _, errOut := run(t, "", "chat", "--offline", "--storage", store, "hello")
		if want := fmt.Sprintf("unknown option %q (known: fsync=1)", opt); code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("--storage %s: exit %d, %q; want 2 and %q", store, code, errOut, want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("--storage %s: the directory was created", store)
		}
	}
}

// TestMCPGatewayTokenNotLogged: agentic-host mcp as a gateway sends the
// bearer token of --mcp-token-env to the --mcp server (its tools are
// served through it), and the token is in none of its log lines, at debug
// level, in text or JSON — not when the server takes it, not when the
// server refuses it (the error that ends the command says "Unauthorized",
// never the token).
func TestMCPGatewayTokenNotLogged(t *testing.T) {
	bin := needBinary(t)
	inner, outer := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(inner, "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	const key = "gw-token-5d1c8e"
	endpoint, _ := mcpHTTP(t, bin, key, "--plugins", inner)
	gateway := []string{"mcp", "--plugins", outer, "--mcp", "acct=" + endpoint, "--mcp-token-env", "acct=ACCT_KEY",
		"--mcp-trust-annotations", "acct", "--log-level", "debug"}
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stderr lockedBuffer
			cmd := exec.Command(bin, append(gateway, "--log-format", format)...)
			cmd.Env = environ("ACCT_KEY=" + key)
			cmd.Stderr = &stderr
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "token-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatalf("connect: %v\n%s", err, stderr.String())
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "acct__get_account", Arguments: map[string]any{"account_id": "42"}})
			if err != nil || res.IsError || !strings.Contains(goText(res), `"plan":"team"`) {
				t.Errorf("the server's tool through the gateway: %s %v\n%s", goText(res), err, stderr.String())
			}
			cs.Close() // the gateway exits: its log is whole
			if stderr.String() == "" {
				t.Error("the gateway logged nothing at debug level")
			}
			if strings.Contains(stderr.String(), key) {
				t.Errorf("the gateway's log holds the token:\n%s", stderr.String())
			}
		})
	}
	const wrong = "gw-wrong-token-93ab"
	code, out, errOut := runBinEnv(t, bin, []string{"ACCT_KEY=" + wrong}, gateway...)
	if code != 1 || !strings.Contains(errOut, "MCP server acct") || !strings.Contains(errOut, "Unauthorized") {
		t.Errorf("a refused token: exit %d, %q; want 1 and the server's refusal", code, errOut)
	}
	if strings.Contains(errOut, wrong) || strings.Contains(out, wrong) {
		t.Errorf("the refused token is in the output:\n%s%s", out, errOut)
	}
}

// TestPluginLimitFlags: plugin call's and mcp's --memory-pages and
// --max-output are the sandbox's: a plugin whose memory grows past the
// pages given fails out of memory naming that limit, one whose output
// passes the bytes given fails output too large naming it (plugin call:
// exit 1; mcp: a tool error starting [out_of_memory] or
// [output_too_large], and the server serves on), and an output within
// them is answered.
func TestPluginLimitFlags(t *testing.T) {
	dir := t.TempDir()
	wasm := filepath.Join(dir, "hostile.wasm")
	if err := os.WriteFile(wasm, plugintest.GoPlugin(t, "../../plugins/testdata/hostile"), 0o644); err != nil {
		t.Fatal(err)
	}
	limits := []string{"--memory-pages", "300", "--max-output", "5000"}
	t.Run("plugin call", func(t *testing.T) {
		for _, tc := range []struct {
			tool, input string
			code        int
			want        string
		}{
			{"memory_bomb", "{}", 1, "the limit is 300 pages"},
			{"big_output", `{"bytes":6000}`, 1, "bytes, the limit is 5000"},
			{"big_output", `{"bytes":4000}`, 0, strings.Repeat("x", 4000)},
		} {
			args := append(append([]string{"plugin", "call"}, limits...), wasm, tc.tool, tc.input)
			code, out, errOut := timedRun(t, tc.tool, 3*time.Minute, args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("plugin call %s %s: exit %d, stdout %.200q, stderr %.500q; want %d and %.60q", tc.tool, tc.input, code, out, errOut, tc.code, tc.want)
			}
		}
		// Without the flags, the defaults: the same output is answered.
		if code, out, errOut := run(t, "", "plugin", "call", wasm, "big_output", `{"bytes":6000}`); code != 0 || !strings.Contains(out, strings.Repeat("x", 6000)) {
			t.Errorf("plugin call big_output without --max-output: exit %d, %.300q", code, errOut)
		}
	})
	t.Run("mcp", func(t *testing.T) {
		bin := needBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var stderr lockedBuffer
		cmd := exec.Command(bin, append([]string{"mcp", "--plugins", dir}, limits...)...)
		cmd.Stderr = &stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "limits", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		defer cs.Close()
		for _, tc := range []struct {
			tool string
			args map[string]any
			kind string // "" for an answer
			want string
		}{
			{"memory_bomb", map[string]any{}, "out_of_memory", "the limit is 300 pages"},
			{"big_output", map[string]any{"bytes": 6000}, "output_too_large", "the limit is 5000"},
			{"big_output", map[string]any{"bytes": 4000}, "", strings.Repeat("x", 4000)},
		} {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err != nil {
				t.Fatalf("%s: %v\n%s", tc.tool, err, stderr.String())
			}
			text := goText(res)
			if tc.kind == "" {
				if res.IsError || !strings.Contains(text, tc.want) {
					t.Errorf("%s %v: %.200q, want it answered", tc.tool, tc.args, text)
				}
				continue
			}
			if !res.IsError || res.Meta["agentic-host/error"] != tc.kind || !strings.HasPrefix(text, "["+tc.kind+"] ") || !strings.Contains(text, tc.want) {
				t.Errorf("%s %v: %.300q %v; want a tool error [%s] saying %q", tc.tool, tc.args, text, res.Meta, tc.kind, tc.want)
			}
		}
	})
}

// TestChatAttachCommand: interactive chat's /attach FILE sends FILE with
// the next message, and with that one only: it says what goes with it,
// the model gets the file (the offline model says what it got) and the
// ledger keeps it in the message's parts; the message after goes without
// it. A file that cannot be read is said so, and the chat goes on.
func TestChatAttachCommand(t *testing.T) {
	dir := t.TempDir()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 255, 7}, 20)...)
	shot := filepath.Join(dir, "shot.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.png")
	storeDir := t.TempDir()
	stdin := "/attach " + shot + "\nlook at this\nand at nothing\n/attach " + missing + "\nstill here\n"
	code, out, errOut := run(t, stdin, "chat", "--offline", "--storage", "file:"+storeDir, "--session", "a")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"[" + shot + " (image/png, 68 bytes) goes with the next message]",
		"You said: look at this [attached: image/png, 68 bytes]",
		"You said: and at nothing\n",
		"missing.png",
		"You said: still here\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the chat does not say %q:\n%s", want, out)
		}
	}
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	events, err := st.Load(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	var inputs [][]ledger.Part
	for _, e := range events {
		if e.Input != nil {
			inputs = append(inputs, e.Input.Parts)
		}
	}
	if len(inputs) != 3 {
		t.Fatalf("%d messages in the ledger, want 3: %+v", len(inputs), inputs)
	}
	if p := inputs[0]; len(p) != 2 || p[1].Type != ledger.PartImage || p[1].MIME != "image/png" || !bytes.Equal(p[1].Data, png) {
		t.Errorf("the first message's parts: %+v; want its text and the image", p)
	}
	for i, p := range inputs[1:] {
		if len(p) != 1 || p[0].Type != ledger.PartText {
			t.Errorf("message %d's parts: %+v; want its text alone", i+2, p)
		}
	}
}

// TestExportToStdout: export -o - writes the archive to stdout (the
// summary goes to stderr), and no file: what it writes is a whole archive
// of the session, which import puts into another store.
func TestExportToStdout(t *testing.T) {
	src := "file:" + t.TempDir()
	if code, out, errOut := run(t, "", "chat", "--offline", "--storage", src, "--session", "s1", "hello there"); code != 0 {
		t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
	}
	// A file named "-" would be written here.
	cwd := t.TempDir()
	t.Chdir(cwd)
	code, out, errOut := run(t, "", "export", "--storage", src, "--session", "s1", "-o", "-")
	if code != 0 || !strings.Contains(errOut, "exported 1 sessions") || !strings.Contains(errOut, "to -") {
		t.Fatalf("export -o -: exit %d, %s", code, errOut)
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Errorf("export -o - wrote %s in the working directory", entries[0].Name())
	}
	a, err := archive.Read(strings.NewReader(out), archive.ReadOptions{})
	if err != nil {
		t.Fatalf("stdout is not an archive (%d bytes): %v", len(out), err)
	}
	s, ok := a.Session("s1")
	if !ok || len(a.Sessions) != 1 || len(s.Events) == 0 || len(a.Manifest.Sessions) != 1 || a.Manifest.Sessions[0].Events != len(s.Events) {
		t.Fatalf("the archive: %+v", a.Manifest)
	}
	path := filepath.Join(t.TempDir(), "s1.tar.gz")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := "file:" + t.TempDir()
	if code, out, errOut := run(t, "", "import", "--storage", dst, path); code != 0 || !strings.Contains(out, "imported 1 sessions") {
		t.Fatalf("import: exit %d, %s %s", code, out, errOut)
	}
	if tr := transcriptOf(t, dst, "s1"); len(tr.Items) != 2 || tr.Items[0].Text != "hello there" {
		t.Errorf("the imported transcript: %+v", tr)
	}
}

// raceProxy forwards TCP connections to a Redis server; before it passes on
// a client's command to delete key (a rewrite of the session starting to
// write its new stream, having read the old one) it calls before, which
// may append to the session: an append that races the rewrite, every time.
func raceProxy(t *testing.T, target, key string, before func()) string {
	t.Helper()
	cmd := []byte(fmt.Sprintf("*2\r\n$3\r\ndel\r\n$%d\r\n%s\r\n", len(key), strings.ToLower(key)))
	return filterProxy(t, target, func() func([]byte) {
		var tail []byte // the end of the connection's last write, for a command split over two
		return func(b []byte) {
			seen := bytes.ToLower(append(tail, b...))
			if bytes.Contains(seen, cmd) {
				before()
			}
			tail = append(tail[:0], seen[max(0, len(seen)-len(cmd)+1):]...)
		}
	})
}

// TestMigrateRetriesRaces: on Redis, a session appended to while migrate
// rewrites it (here, every time the rewrite starts writing its new
// stream, a message is appended beside it) is tried again, three times in
// all: then it is left as it is, named with what to do, and the exit code
// is 1. A session that races once is migrated at the second try.
func TestMigrateRetriesRaces(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer raw.Close()
	ctx := t.Context()
	const id = "plain"
	stream := "agentic:{default:" + id + "}:events"
	n := 0
	appendMessage := func() {
		n++
		e, err := ledger.Encode(ledger.Event{ID: fmt.Sprintf("evt_queued_%d", n), Kind: ledger.KindInput, Time: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
			Input: &ledger.Input{MessageID: fmt.Sprintf("msg_queued_%d", n), Parts: []ledger.Part{ledger.TextPart("queued")}}})
		if err != nil {
			t.Error(err)
			return
		}
		if err := raw.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"e", string(e), "b", fmt.Sprintf("token-queued-%d", n)}}).Err(); err != nil {
			t.Error(err)
		}
	}
	for _, tc := range []struct {
		name  string
		races int // how many of the rewrites an append races
		tries int64
		code  int
		want  string
	}{
		{"always", 1 << 30, 3, 1, "(3 times): stop the hosts that use the store, then run migrate again"},
		{"once", 1, 2, 0, "rewrote session plain: 4 of 5 events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := raw.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			putSession(t, ctx, raw, id, "testdata/migrate/edited/plain.jsonl")
			before, err := raw.XRange(ctx, stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var tries atomic.Int64
			proxy := raceProxy(t, srv.Addr(), "agentic:{default:"+id+"}:rewrite", func() {
				if tries.Add(1) <= int64(tc.races) {
					appendMessage()
				}
			})
			code, out, errOut := run(t, "", "migrate", "--storage", "redis://"+proxy+"/0")
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("migrate: exit %d\n%s%s\nwant %d and %q", code, out, errOut, tc.code, tc.want)
			}
			if got := tries.Load(); got != tc.tries {
				t.Errorf("the session was rewritten %d times, want %d", got, tc.tries)
			}
			after, err := raw.XRange(ctx, stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			if appended := min(int(tc.tries), tc.races); len(after) != len(before)+appended {
				t.Fatalf("%d entries after, %d before; want the %d appended too", len(after), len(before), appended)
			}
			if tc.code != 0 {
				if !strings.Contains(errOut, "session "+id+":") {
					t.Errorf("the session is not named: %s", errOut)
				}
				if !reflect.DeepEqual(after[:len(before)], before) {
					t.Error("a session migrate gave up on was changed")
				}
			}
		})
	}
}

// TestPluginPullDefaultTimeout: plugin pull gives up after 2 minutes
// unless --timeout says otherwise, as serve gives up a pull: its usage
// says so.
func TestPluginPullDefaultTimeout(t *testing.T) {
	code, out, errOut := run(t, "", "plugin", "pull", "-h")
	if code != 0 || !strings.Contains(out, "-timeout DURATION") {
		t.Fatalf("plugin pull -h: exit %d\n%s%s", code, out, errOut)
	}
	i := strings.Index(out, "-timeout DURATION")
	flag, _, _ := strings.Cut(out[i:]+"\n  -", "\n  -")
	if !strings.Contains(flag, "(default 2m0s)") {
		t.Errorf("plugin pull's --timeout: %q, want a default of 2m0s", flag)
	}
}
