package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// More hostile modules through the commands: what else a tenant may upload
// to make loading hang or exhaust the host, and a directory of them.

// cKitDir is the C kit, for building the test plugins.
func cKitDir(t *testing.T) string {
	t.Helper()
	kit, err := filepath.Abs("../../pdk/c")
	if err != nil {
		t.Fatal(err)
	}
	return kit
}

// bombsWasm builds the hostile C plugin of the plugins package's tests.
func bombsWasm(t *testing.T) []byte {
	kit := cKitDir(t)
	return plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"bombs.c", kit + "/agentic.c"}, []string{kit}, nil)
}

// timedRun runs the command and fails the test if it took longer than
// guard (a guard against a hang, not a speed check).
func timedRun(t *testing.T, what string, guard time.Duration, args ...string) (int, string, string) {
	t.Helper()
	start := time.Now()
	code, out, errOut := run(t, "", args...)
	if took := time.Since(start); took > guard {
		t.Errorf("%s took %s (a guard against a hang: %s)", what, took, guard)
	}
	return code, out, errOut
}

// TestPluginCommandsLoadBombs: plugin describe and plugin call on a time
// bomb that went off (bombs.c, its start function looping from a time in
// the past), the compile memory bomb (6 MB of nested blocks) and a module
// file over Limits.MaxModuleBytes: each ends within its deadline, with an
// error that says which bound stopped it.
func TestPluginCommandsLoadBombs(t *testing.T) {
	dir := t.TempDir()
	bomb, err := plugintest.WithStart(bombsWasm(t), "bomb")
	if err != nil {
		t.Fatal(err)
	}
	// bombs.c goes off at bomb_after (built as 0x5EED5EED5EED5EED): one
	// nanosecond after the epoch has long passed.
	if bomb, err = plugintest.PatchU64(bomb, 0x5EED5EED5EED5EED, 1); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"timebomb.wasm": bomb,
		// Two million nested blocks: compiling them takes ~1.6 GiB within
		// seconds. (One million take ~0.8 GiB, then minutes of CPU in
		// wazero's loop detection: under the default 1 GiB, so that only
		// the compile timeout stops them.)
		"memorybomb.wasm": plugintest.NestedBlocks(2_000_000),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Over the default MaxModuleBytes by one byte: a sparse file, read no
	// further than the limit.
	big := filepath.Join(dir, "big.wasm")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0, 'a', 's', 'm', 1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(plugins.DefaultMaxModuleBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, tc := range []struct {
		file  string
		flags []string
		guard time.Duration // the deadline, and a generous bound beyond it
		want  string
	}{
		{"timebomb.wasm", []string{"--timeout", "1s"}, time.Minute, "instantiating: timed out after 1s"},
		// Its compile runs out of the default 1 GiB long before this
		// deadline, which only guards against a hang.
		{"memorybomb.wasm", []string{"--compile-timeout", "2m"}, 3 * time.Minute, "needed more than 1024 MiB (Limits.MaxCompileBytes)"},
		{"big.wasm", nil, time.Minute, "over 67108864 bytes, the limit (Limits.MaxModuleBytes)"},
	} {
		for _, cmd := range [][]string{{"describe"}, {"call"}} {
			args := append(append(append([]string{"plugin"}, cmd...), "--cache-dir", ""), tc.flags...)
			args = append(args, filepath.Join(dir, tc.file))
			if cmd[0] == "call" {
				args = append(args, "ok", "{}")
			}
			code, out, errOut := timedRun(t, strings.Join(args[:2], " ")+" "+tc.file, tc.guard, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, plugins.ErrInvalidModule.Error()) {
				t.Errorf("plugin %s %s: exit %d, want 1 and %q\nstdout: %.300s\nstderr: %.500s", cmd[0], tc.file, code, tc.want, out, errOut)
			}
		}
	}
}

// TestChatHostilePluginDirLoadsTogether: chat --plugins on a directory of
// two compile bombs and two start functions that never return, beside
// count_vowels, starts within about the slowest module's deadlines (5s
// each), not their sum (20s), and answers with count_vowels: the real
// binary, as a user runs it.
func TestChatHostilePluginDirLoadsTogether(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	kit := cKitDir(t)
	vowels := plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil)
	sidecar, err := os.ReadFile("../../examples/plugins/count_vowels/count_vowels.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"bomb1.wasm":        plugintest.NestedBlocks(100_000),
		"bomb2.wasm":        plugintest.NestedBlocks(100_001),
		"loop1.wasm":        plugintest.StartLoop(),
		"loop2.wasm":        plugintest.StartLoop(),
		"count_vowels.wasm": vowels,
		"count_vowels.json": sidecar,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const compile = 5 * time.Second
	sum := 2*compile + 2*plugins.DefaultCallTimeout // the bombs' compiles, the loops' starts
	start := time.Now()
	code, out, errOut := runBin(t, bin, "chat", "--offline", "--plugins", dir, "--plugin-compile-timeout", compile.String(),
		"--storage", "file:"+t.TempDir(), "--session", "h", "count_vowels text=Hello")
	took := time.Since(start)
	if code != 0 || !strings.Contains(out, "[tool count_vowels") || !strings.Contains(out, `"count":2`) {
		t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("chat answered in %s (its modules' deadlines add up to %s)", took.Round(time.Millisecond), sum)
	// Generous: well under the sum, for a noisy machine.
	if bound := sum * 2 / 3; took > bound {
		t.Errorf("chat took %s, over %s: the modules of --plugins loaded one after the other", took, bound)
	}
}

// TestPluginListConflictsAndHashes: plugin list reports a validator and a
// policy that two modules offer — the release_notes validator and the
// side_effects policy, each in a copy under another name — as conflicts,
// whether the copy's name sorts before or after the original's (so loads
// before or after it); neither module serves them. Every module's hash,
// served or refused, is "sha256:" and the hex SHA-256 of its file (the
// table shows its first 12 digits).
func TestPluginListConflictsAndHashes(t *testing.T) {
	kit := cKitDir(t)
	notes := plugintest.CPlugin(t, "../../examples/plugins/release_notes", []string{"release_notes.c", kit + "/agentic.c"}, []string{kit}, nil)
	effects := plugintest.CPlugin(t, "../../examples/plugins/side_effects", []string{"side_effects.c", kit + "/agentic.c"}, []string{kit}, nil)
	broken := []byte("\x00asm\x01\x00\x00\x00 not a module")
	hashOf := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "sha256:" + hex.EncodeToString(sum[:])
	}

	for _, copies := range []struct{ notes, effects string }{{"aaa", "aab"}, {"zzz", "zzy"}} {
		t.Run(copies.notes, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string][]byte{
				"release_notes.wasm":     notes,
				copies.notes + ".wasm":   notes,
				"side_effects.wasm":      effects,
				copies.effects + ".wasm": effects,
				"broken.wasm":            broken,
			}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			notesPair := strings.Join(sorted(copies.notes, "release_notes"), " and ")
			effectsPair := strings.Join(sorted(copies.effects, "side_effects"), " and ")

			code, out, errOut := run(t, "", "plugin", "list", "--plugins", dir)
			for _, want := range []string{
				"validator release_notes: offered by " + notesPair,
				"policy side_effects: offered by " + effectsPair,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("plugin list does not say %q:\n%s", want, out)
				}
			}
			if code != 1 || !strings.Contains(errOut, "1 refused, 2 in conflict") {
				t.Errorf("plugin list: exit %d, %q", code, errOut)
			}
			// The table's hash column, for the modules served and the one
			// refused: the first 12 hex digits.
			rows := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], "sha256:") {
					rows[f[0]] = f[1]
				}
			}
			for name, b := range files {
				mod, want := strings.TrimSuffix(name, ".wasm"), hashOf(b)[:len("sha256:")+12]
				if rows[mod] != want {
					t.Errorf("plugin list shows %s with hash %q, want %q:\n%s", mod, rows[mod], want, out)
				}
			}

			code, out, _ = run(t, "", "plugin", "list", "--json", "--plugins", dir)
			var listing struct {
				Modules   []struct{ Name, Hash string } `json:"modules"`
				Conflicts []struct {
					Kind, Name string
					Modules    []string
				} `json:"conflicts"`
				Refusals []struct{ Name, Hash, Error string } `json:"refusals"`
			}
			if err := json.Unmarshal([]byte(out), &listing); err != nil || code != 1 {
				t.Fatalf("plugin list --json: exit %d, %v\n%s", code, err, out)
			}
			var conflicts []string
			for _, c := range listing.Conflicts {
				conflicts = append(conflicts, c.Kind+" "+c.Name+": "+strings.Join(c.Modules, ","))
			}
			want := []string{
				"policy side_effects: " + strings.Join(sorted(copies.effects, "side_effects"), ","),
				"validator release_notes: " + strings.Join(sorted(copies.notes, "release_notes"), ","),
			}
			if strings.Join(conflicts, "; ") != strings.Join(want, "; ") {
				t.Errorf("conflicts %q, want %q", conflicts, want)
			}
			if len(listing.Modules) != 4 {
				t.Errorf("%d modules listed, want 4", len(listing.Modules))
			}
			for _, m := range listing.Modules {
				if want := hashOf(files[m.Name+".wasm"]); m.Hash != want {
					t.Errorf("module %s: hash %q, want %q (the SHA-256 of its file)", m.Name, m.Hash, want)
				}
			}
			if len(listing.Refusals) != 1 || listing.Refusals[0].Name != "broken" || listing.Refusals[0].Hash != hashOf(broken) {
				t.Errorf("refusals %+v, want broken with hash %s", listing.Refusals, hashOf(broken))
			}
		})
	}
}

// sorted returns its arguments in order.
func sorted(a, b string) []string {
	if b < a {
		return []string{b, a}
	}
	return []string{a, b}
}
