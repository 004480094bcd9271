package plugintest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MinisignKey is a minisign key pair made by the minisign tool itself
// (Debian's package minisign), so that a test signs modules exactly as
// their authors do. Without the tool the test is skipped, unless
// AGENTIC_REQUIRE_MINISIGN=1, which fails it instead.
type MinisignKey struct {
	// PublicKey is the public key's base64 line, the second line of
	// PublicKeyFile ("RWQ…"): what a tenant's trusted_keys lists.
	PublicKey string
	// ID is the key's id as minisign prints it (upper-case hexadecimal).
	ID string
	// PublicKeyFile and SecretKeyFile are the key's files (minisign.pub
	// and minisign.key); the secret key is not encrypted (minisign -W).
	PublicKeyFile, SecretKeyFile string
}

// minisignPath finds the minisign tool, or skips (fails) tb.
func minisignPath(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("minisign")
	if err != nil {
		msg := "minisign is not installed (apt-get install minisign; scripts/test-deps.sh installs it)"
		if os.Getenv("AGENTIC_REQUIRE_MINISIGN") == "1" {
			tb.Fatal(msg + ", and AGENTIC_REQUIRE_MINISIGN=1 requires it")
		}
		tb.Skip(msg)
	}
	return path
}

// NewMinisignKey makes a key pair with `minisign -G -W` in a temporary
// directory of tb.
func NewMinisignKey(tb testing.TB) *MinisignKey {
	tb.Helper()
	bin := minisignPath(tb)
	dir := tb.TempDir()
	k := &MinisignKey{PublicKeyFile: filepath.Join(dir, "minisign.pub"), SecretKeyFile: filepath.Join(dir, "minisign.key")}
	runMinisign(tb, bin, "-G", "-W", "-p", k.PublicKeyFile, "-s", k.SecretKeyFile)
	b, err := os.ReadFile(k.PublicKeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		tb.Fatalf("minisign wrote an unexpected public key file:\n%s", b)
	}
	k.PublicKey = strings.TrimSpace(lines[1])
	_, id, _ := strings.Cut(lines[0], "minisign public key ")
	k.ID = strings.TrimSpace(id)
	return k
}

// Sign signs data with `minisign -S` and returns the signature file's
// text (what NAME.wasm.minisig holds). Args are more of minisign's flags:
// "-t", "COMMENT" sets the trusted comment, "-l" makes a legacy (Ed,
// not prehashed) signature.
func (k *MinisignKey) Sign(tb testing.TB, data []byte, args ...string) []byte {
	tb.Helper()
	bin := minisignPath(tb)
	dir := tb.TempDir()
	file := filepath.Join(dir, "module.wasm")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	runMinisign(tb, bin, append([]string{"-S", "-s", k.SecretKeyFile, "-m", file, "-x", file + ".minisig"}, args...)...)
	sig, err := os.ReadFile(file + ".minisig")
	if err != nil {
		tb.Fatal(err)
	}
	return sig
}

func runMinisign(tb testing.TB, bin string, args ...string) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("minisign %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}
