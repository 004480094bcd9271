// Package nodetest gives tests the npm clients of the protocols' peers
// (the AI SDK's, the TypeScript MCP client), pinned by the package-lock.json
// of their directory and installed there on first use.
package nodetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var npmMu sync.Mutex // one npm ci at a time in a test process

// Client returns dir, absolute, with its node_modules installed (npm ci
// when node_modules/pkg is missing). what names the client in a skip. A
// machine without node or npm skips the test, unless
// AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1, which fails it.
func Client(tb testing.TB, dir, pkg, what string) string {
	tb.Helper()
	dir, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		Missing(tb, "node is not installed (apt-get install nodejs npm): the "+what+" cannot run")
	}
	npmMu.Lock()
	defer npmMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		Missing(tb, "npm is not installed (apt-get install npm): the "+what+" cannot be installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// Missing skips the test for want of a tool, or fails it when
// AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1 says every tool must be there.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") == "1" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}
