package plugintest

import (
	"crypto/sha256"
	"path/filepath"
	"strings"
	"testing"
)

// TestHashDirMissingPackages: a kit's npm packages that were never
// installed are named as such, with what installs them, not as a bare
// lstat error.
func TestHashDirMissingPackages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pdk", "assemblyscript", "node_modules", "@extism", "as-pdk")
	err := hashDir(sha256.New(), dir)
	if err == nil || !strings.Contains(err.Error(), "is not installed") || !strings.Contains(err.Error(), "plugin-toolchains.sh") {
		t.Errorf("hashing a kit's missing packages: %v, want it named not installed, with what installs it", err)
	}
	if err := hashDir(sha256.New(), filepath.Join(t.TempDir(), "gone")); err == nil || strings.Contains(err.Error(), "is not installed") {
		t.Errorf("hashing another missing directory: %v, want the plain error", err)
	}
}
