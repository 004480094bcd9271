package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/oci"
)

const pullUsage = `Usage: agentic-host plugin pull [flags] oci://REGISTRY/REPOSITORY@sha256:HEX [DIR]

Pull a plugin module from an OCI registry, pinned by the digest of its
manifest, as serve pulls a tenant's plugins: list, and write it into DIR
(default: the current directory) as NAME.wasm, with its signature as
NAME.wasm.minisig when the manifest has one. The manifest is checked
against the digest and each layer against the manifest; a tag without a
digest is refused. Loopback registries (and those of --insecure) are
reached over plain HTTP, others over HTTPS. The registry may be at any
address; where it redirects (its CDN) must be a public address. No proxy
is taken from the environment. A pull that takes longer than --timeout
fails.

Flags:
`

// defaultPullTimeout bounds a pull unless --timeout says otherwise: as
// long as serve gives a pull at start.
const defaultPullTimeout = 2 * time.Minute

// pluginPullCmd is "plugin pull".
func pluginPullCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("plugin pull", env)
	var insecure pluginList
	fs.Var(&insecure, "insecure", "reach the registry `HOST[:PORT]` over plain HTTP (repeatable)")
	cache := fs.String("cache-dir", "", "keep what is pulled by digest in `DIR`, and pull from there when it holds it")
	maxBytes := fs.Int("max-module-bytes", plugins.DefaultMaxModuleBytes, "refuse a module larger than `BYTES`")
	timeout := fs.Duration("timeout", defaultPullTimeout, "give up a pull that takes longer than `DURATION`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), pullUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fail(2, "want oci://REGISTRY/REPOSITORY@sha256:HEX [DIR]")
	}
	ref, err := oci.ParseReference(pos[0])
	if err != nil {
		return fail(2, "%v", err)
	}
	if *timeout <= 0 {
		return fail(2, "--timeout %s: want a positive duration", *timeout)
	}
	dir := "."
	if len(pos) == 2 {
		dir = pos[1]
	}
	pctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	m, err := oci.Pull(pctx, ref, oci.Options{CacheDir: *cache, MaxModuleBytes: *maxBytes, Insecure: insecure})
	if err != nil {
		if pctx.Err() != nil && ctx.Err() == nil {
			return fail(1, "%v (the pull took longer than --timeout %s)", err, *timeout)
		}
		return fail(1, "%v", err)
	}
	path := filepath.Join(dir, m.Source.Name+".wasm")
	if m.Source.Signature != nil {
		if err := os.WriteFile(path+plugins.SignatureSuffix, m.Source.Signature, 0o644); err != nil {
			return fail(1, "%v", err)
		}
	} else if err := os.Remove(path + plugins.SignatureSuffix); err != nil && !os.IsNotExist(err) {
		return fail(1, "%v", err)
	}
	if err := os.WriteFile(path, m.Source.Wasm, 0o644); err != nil {
		return fail(1, "%v", err)
	}
	signed := "unsigned"
	if s, err := plugins.ReadSignature(m.Source.Signature); m.Source.Signature != nil && err == nil {
		signed = fmt.Sprintf("signed by key %s (%q; not verified: plugin verify checks it)", s.KeyID, s.TrustedComment)
	}
	fmt.Fprintf(env.Stdout, "pulled %s into %s (%s), %s\n", ref, path, fileHash(m.Source.Wasm), signed)
	return nil
}
