// Command release builds a release of agentic-host (make release): the
// binary cross-compiled for each target with its version stamped, one
// archive per target, a CycloneDX SBOM per target read off the binary's own
// module list (what is linked, not what go.mod may name), and SHA256SUMS
// over all of them.
//
// Usage:
//
//	release -version v0.3.0 -out dist [-targets linux/amd64,darwin/arm64]
//
// It writes, for each target OS/ARCH:
//
//	dist/agentic-host_VERSION_OS_ARCH.tar.gz   agentic-host, README.md, CHANGELOG.md
//	dist/agentic-host_VERSION_OS_ARCH.cdx.json the SBOM (CycloneDX 1.6 JSON)
//	dist/SHA256SUMS                            sha256sum's format, every file above
//
// The release is reproducible: CGO_ENABLED=0, -trimpath, no build id, the
// archives' entries dated at the commit's time, not the build's, and SBOMs
// without a serial number or a timestamp; the same commit gives the same
// SHA256SUMS. The SBOM
// comes from the CycloneDX project's own generator, cyclonedx-gomod, run
// pinned from the module proxy.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Targets are the platforms a release is built for by default.
var Targets = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// cyclonedxGomod is the SBOM generator, pinned.
const cyclonedxGomod = "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0"

// stampVar is the variable the version is stamped into.
const stampVar = "github.com/agentichost/agentic/internal/cli.stamped"

// versionRE is what a release's version looks like: a semantic version
// with a leading v (v1.2.3, v0.4.0-rc.1, v0.0.0-devel-abcdef123456).
var versionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Options configures a release.
type Options struct {
	Version string   // the version stamped into the binary and named in the files
	Out     string   // the directory the files are written to, emptied first
	Targets []string // OS/ARCH pairs
	Root    string   // the module's root directory
	Go      string   // the go command
	Log     io.Writer
}

func main() {
	opts := Options{Log: os.Stderr, Go: "go"}
	var targets string
	flag.StringVar(&opts.Version, "version", "", "the `VERSION` to stamp (v1.2.3)")
	flag.StringVar(&opts.Out, "out", "dist", "the `DIR` the release is written to (emptied first)")
	flag.StringVar(&targets, "targets", strings.Join(Targets, ","), "the `OS/ARCH` targets, comma-separated")
	flag.Parse()
	if g := os.Getenv("GO"); g != "" {
		opts.Go = g
	}
	opts.Targets = strings.Split(targets, ",")
	root, err := os.Getwd()
	if err != nil {
		fatal(err)
	}
	opts.Root = root
	files, err := Build(context.Background(), opts)
	if err != nil {
		fatal(err)
	}
	for _, f := range files {
		fmt.Println(filepath.Join(opts.Out, f))
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}

// Build builds the release and returns the names of the files it wrote in
// opts.Out, SHA256SUMS last.
func Build(ctx context.Context, opts Options) ([]string, error) {
	if !versionRE.MatchString(opts.Version) {
		return nil, fmt.Errorf("-version %q: want a semantic version with a leading v (v1.2.3)", opts.Version)
	}
	for _, t := range opts.Targets {
		os, arch, ok := strings.Cut(t, "/")
		if !ok || os == "" || arch == "" {
			return nil, fmt.Errorf("-targets: %q is not OS/ARCH", t)
		}
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	mtime, err := commitTime(ctx, opts.Root)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(opts.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "agentic-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	var files []string
	for _, t := range opts.Targets {
		goos, goarch, _ := strings.Cut(t, "/")
		base := fmt.Sprintf("agentic-host_%s_%s_%s", opts.Version, goos, goarch)
		bin := filepath.Join(work, base, "agentic-host")
		fmt.Fprintf(opts.Log, "release: building %s\n", t)
		build := exec.CommandContext(ctx, opts.Go, "build", "-trimpath", "-buildvcs=true",
			"-ldflags", "-s -w -buildid= -X "+stampVar+"="+opts.Version,
			"-o", bin, "./cmd/agentic-host")
		build.Dir = opts.Root
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-mod=readonly")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", t, err, out)
		}
		archive := base + ".tar.gz"
		entries := []entry{{"agentic-host", bin, 0o755}}
		for _, doc := range []string{"README.md", "CHANGELOG.md"} {
			entries = append(entries, entry{doc, filepath.Join(opts.Root, doc), 0o644})
		}
		if err := writeArchive(filepath.Join(opts.Out, archive), base, entries, mtime); err != nil {
			return nil, fmt.Errorf("archiving %s: %w", t, err)
		}
		sbom := base + ".cdx.json"
		fmt.Fprintf(opts.Log, "release: the SBOM of %s\n", t)
		gen := exec.CommandContext(ctx, opts.Go, "run", cyclonedxGomod, "bin", "-json", "-noserial", "-notimestamp",
			"-version", opts.Version, "-output", filepath.Join(opts.Out, sbom), bin)
		gen.Dir = opts.Root
		gen.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := gen.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("the SBOM of %s (%s): %v\n%s", t, cyclonedxGomod, err, out)
		}
		files = append(files, archive, sbom)
	}
	sums, err := checksums(opts.Out, files)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "SHA256SUMS"), sums, 0o644); err != nil {
		return nil, err
	}
	return append(files, "SHA256SUMS"), nil
}

// commitTime is the time of the commit the release is built from, the time
// of every archive entry.
func commitTime(ctx context.Context, root string) (time.Time, error) {
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%ct")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log (a release is built from a commit): %w", err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %q is not a time", out)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// entry is a file of an archive: its name there, its path here, its mode.
type entry struct {
	name, path string
	mode       int64
}

// writeArchive writes a gzipped tar of the entries, under the directory
// dir, every entry owned by root and dated mtime.
func writeArchive(path, dir string, entries []entry, mtime time.Time) error {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	gz.ModTime = mtime
	tw := tar.NewWriter(gz)
	hdr := func(name string, mode, size int64, typ byte) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Size: size, Typeflag: typ, ModTime: mtime, Format: tar.FormatPAX,
			Uid: 0, Gid: 0, Uname: "root", Gname: "root"}
	}
	if err := tw.WriteHeader(hdr(dir+"/", 0o755, 0, tar.TypeDir)); err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr(dir+"/"+e.name, e.mode, int64(len(b)), tar.TypeReg)); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// checksums returns the SHA-256 of each file in dir, in sha256sum's
// format (sha256sum -c SHA256SUMS checks them), sorted by name.
func checksums(dir string, files []string) ([]byte, error) {
	names := slices.Clone(files)
	slices.Sort(names)
	var out bytes.Buffer
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&out, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	}
	return out.Bytes(), nil
}
