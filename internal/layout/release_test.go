package layout_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreviousRelease: scripts/previous-release.sh, which make release,
// make api-check and make upgrade-soak read, names the previous release
// in a clone without tags (the newest "## vX.Y.Z" of CHANGELOG.md, on the
// commit that added it) and with one (the last v* tag), and the version a
// build stamps: the release at its commit, NAME-N-gCOMMIT after it,
// v0.0.0-devel-COMMIT before any, -dirty with changes.
func TestPreviousRelease(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts", "previous-release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		t.Helper()
		git("add", "-A")
		git("commit", "-qm", msg)
		return git("rev-parse", "HEAD")
	}
	ask := func(what string) string {
		t.Helper()
		cmd := exec.Command("bash", "scripts/previous-release.sh", what)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("previous-release.sh %s: %v", what, err)
		}
		return strings.TrimSpace(string(out))
	}
	check := func(when, name, commit, version string) {
		t.Helper()
		if got := ask("name"); got != name {
			t.Errorf("%s: name %q, want %q", when, got, name)
		}
		if got := ask("commit"); got != commit {
			t.Errorf("%s: commit %q, want %q", when, got, commit)
		}
		if got := ask("version"); got != version {
			t.Errorf("%s: version %q, want %q", when, got, version)
		}
	}
	git("init", "-q")
	write("scripts/previous-release.sh", string(script))
	write("CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n- a start\n")
	first := commit("start")
	check("no release", "", "", "v0.0.0-devel-"+first[:12])

	write("CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n## v0.1.0 — 2026-12-01\n\n- a start\n")
	released := commit("release v0.1.0")
	check("at the release's commit", "v0.1.0", released, "v0.1.0")

	write("main.go", "package main\n")
	commit("more")
	write("CHANGELOG.md", "# Changelog\n\n## Unreleased\n\n- more\n\n## v0.1.0 — 2026-12-01\n\n- a start\n")
	after := commit("more again")
	check("two commits after", "v0.1.0", released, "v0.1.0-2-g"+after[:12])
	write("main.go", "package main // changed\n")
	check("with changes", "v0.1.0", released, "v0.1.0-2-g"+after[:12]+"-dirty")
	git("checkout", "-q", "--", "main.go")

	// A tag wins over the changelog.
	git("tag", "v0.2.0", first)
	tagged := git("rev-parse", "v0.2.0^{commit}")
	if got := ask("name"); got != "v0.2.0" {
		t.Errorf("with a tag: name %q, want v0.2.0", got)
	}
	if got := ask("commit"); got != tagged {
		t.Errorf("with a tag: commit %q, want %q", got, tagged)
	}
	if got := ask("version"); !strings.HasPrefix(got, "v0.2.0-3-g") {
		t.Errorf("with a tag: version %q, want v0.2.0-3-g…", got)
	}
	cmd := exec.Command("bash", "scripts/previous-release.sh", "weather")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "want name, commit or version") {
		t.Errorf("a bad argument: %v %s", err, out)
	}
}
