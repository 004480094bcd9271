package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReleaseOfThisMachine builds a release for this machine's platform
// twice: the files named, SHA256SUMS that sha256sum -c accepts, the same
// bytes both times, an archive whose binary says the stamped version, and
// an SBOM in CycloneDX that lists the modules linked in at go.mod's
// versions. It builds the binary twice more, minutes on 2 cores: make
// release runs it (AGENTIC_RELEASE_TEST=1) after the release it checks,
// whose build it finds in the cache, and CI runs make release.
func TestReleaseOfThisMachine(t *testing.T) {
	if os.Getenv("AGENTIC_RELEASE_TEST") != "1" {
		t.Skip("builds the binary twice: make release runs it (AGENTIC_RELEASE_TEST=1)")
	}
	root, _ := filepath.Abs("../../..")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	target := runtime.GOOS + "/" + runtime.GOARCH
	const version = "v0.0.0-test.1"
	build := func() (string, []string) {
		out := t.TempDir()
		files, err := Build(ctx, Options{Version: version, Out: out, Targets: []string{target}, Root: root, Go: "go"})
		if err != nil {
			t.Fatal(err)
		}
		return out, files
	}
	out, files := build()
	base := "agentic-host_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH
	if want := []string{base + ".tar.gz", base + ".cdx.json", "SHA256SUMS"}; strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", files, want)
	}

	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	again, _ := build()
	if sums2, _ := os.ReadFile(filepath.Join(again, "SHA256SUMS")); !bytes.Equal(sums, sums2) {
		t.Errorf("the same commit gave two releases:\n%s\n%s", sums, sums2)
	}

	// The archive: the binary, the README and the changelog under one
	// directory; the binary says its version.
	f, err := os.Open(filepath.Join(out, base+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	bin := filepath.Join(t.TempDir(), "agentic-host")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == base+"/agentic-host" {
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(bin, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := base + "/ " + base + "/agentic-host " + base + "/README.md " + base + "/CHANGELOG.md"; strings.Join(names, " ") != want {
		t.Errorf("the archive holds %v, want %s", names, want)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "agentic-host "+version+" (commit ") {
		t.Errorf("the released binary's version: %q, %v; want agentic-host %s (commit …)", v, err, version)
	}

	// The SBOM.
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Component struct {
				Name, Version string
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name, Version, PURL string
		} `json:"components"`
	}
	b, err := os.ReadFile(filepath.Join(out, base+".cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" || bom.Metadata.Component.Name != "github.com/agentichost/agentic" || bom.Metadata.Component.Version != version {
		t.Errorf("the SBOM: %s %s of %s %s; want CycloneDX 1.6 of github.com/agentichost/agentic %s",
			bom.BOMFormat, bom.SpecVersion, bom.Metadata.Component.Name, bom.Metadata.Component.Version, version)
	}
	for _, mod := range []string{"github.com/tetratelabs/wazero", "github.com/openai/openai-go/v3", "github.com/redis/go-redis/v9"} {
		list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", mod)
		list.Dir = root
		want, err := list.Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", mod, err)
		}
		found := false
		for _, c := range bom.Components {
			if c.Name == mod {
				found = true
				if c.Version != strings.TrimSpace(string(want)) || !strings.HasPrefix(c.PURL, "pkg:golang/") {
					t.Errorf("the SBOM lists %s %s (%s), want %s", mod, c.Version, c.PURL, want)
				}
			}
		}
		if !found {
			t.Errorf("the SBOM does not list %s", mod)
		}
	}
}

// TestReleaseRefusesBadInput: a version that is not semantic, or a target
// that is not OS/ARCH, is refused before anything is built.
func TestReleaseRefusesBadInput(t *testing.T) {
	for _, opts := range []Options{
		{Version: "1.2.3", Targets: Targets},
		{Version: "v1.2", Targets: Targets},
		{Version: "v1.2.3", Targets: []string{"linux"}},
	} {
		opts.Out = filepath.Join(t.TempDir(), "dist")
		if _, err := Build(context.Background(), opts); err == nil {
			t.Errorf("%+v: built", opts)
		}
		if _, err := os.Stat(opts.Out); err == nil {
			t.Errorf("%+v: wrote %s", opts, opts.Out)
		}
	}
}
