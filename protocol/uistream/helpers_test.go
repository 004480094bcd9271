package uistream

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// needAIClient returns the directory of the AI SDK client (npm ai, pinned
// by testdata/ai-client/package-lock.json), its packages installed (npm ci
// when missing). A machine without node or npm skips the test, unless
// AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1, which fails it.
func needAIClient(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs(filepath.Join("testdata", "ai-client"))
	missing := func(why string) {
		if os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not installed (apt-get install nodejs npm): the AI SDK client cannot run")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm is not installed (apt-get install npm): the AI SDK client cannot be installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}
