package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
)

const exportUsage = `Usage:
  agentic-host export [--storage URL] --session ID [--tenant T] -o FILE
  agentic-host export [--storage URL] --tenant T -o FILE

Write a session, or every session and blob of a tenant of serve, to a
portable archive (a .tar.gz of the sessions' ledgers in canonical JSONL,
their blobs and a manifest) that agentic-host import puts into any store.
-o - writes to stdout.

Flags:
`

// exportCmd implements "agentic-host export".
func exportCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("export", env)
	storeURL := fs.String("storage", DefaultStorage, storageHelp)
	session := fs.String("session", "", "the `ID` of the session to export")
	tenant := fs.String("tenant", "", "the `TENANT` of serve whose session (with --session) or sessions to export")
	out := fs.String("o", "", "the archive `FILE` to write (- for stdout)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), exportUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		fs.Usage()
		return fail(2, "unexpected arguments %q", pos)
	case *out == "":
		return fail(2, "want -o FILE (- for stdout)")
	case *session == "" && *tenant == "":
		return fail(2, "want --session ID or --tenant T")
	case *session != "" && !storage.ValidSessionID(*session):
		return fail(2, "invalid session id %q", *session)
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storeURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	view, err := tenantView(store, *tenant)
	if err != nil {
		return err
	}
	write := func(w io.Writer) (archive.Manifest, error) {
		aw := archive.NewWriter(w, *tenant)
		if *session != "" {
			err = archive.ExportSession(ctx, view, *session, aw)
		} else {
			err = archive.ExportAll(ctx, view, aw)
		}
		if err != nil {
			return aw.Manifest(), err
		}
		return aw.Manifest(), aw.Close()
	}
	var m archive.Manifest
	if *out == "-" {
		m, err = write(env.Stdout)
	} else {
		m, err = writeFileAtomic(*out, write)
	}
	if err != nil {
		return fail(1, "%v", err)
	}
	events := 0
	for _, s := range m.Sessions {
		events += s.Events
	}
	fmt.Fprintf(env.Stderr, "exported %d sessions (%d events) and %d blobs to %s\n", len(m.Sessions), events, len(m.Blobs), *out)
	return nil
}

// writeFileAtomic writes a file through a temporary one renamed into
// place, so that a failure leaves no half-written file.
func writeFileAtomic[T any](path string, write func(io.Writer) (T, error)) (T, error) {
	var zero T
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return zero, err
	}
	v, err := write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return zero, err
	}
	return v, nil
}

// tenantView returns the tenant's prefix of store, or store for "".
func tenantView(store storage.Storage, tenant string) (storage.Storage, error) {
	if tenant == "" {
		return store, nil
	}
	view, err := storage.Prefix(store, tenant+":")
	if err != nil {
		return nil, fail(2, "--tenant %q: %v", tenant, err)
	}
	return view, nil
}

const importUsage = `Usage: agentic-host import [--storage URL] [--tenant T] [--session ID] [--replace] FILE

Put the sessions and blobs of an archive (agentic-host export, serve's
export route, a retention archive) into a store, or into a tenant of
serve's. A session the store holds already refuses the whole import
(nothing is imported) unless --replace. The archive is checked whole first:
a malformed one imports nothing.

Flags:
`

// importCmd implements "agentic-host import".
func importCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("import", env)
	storeURL := fs.String("storage", DefaultStorage, storageHelp)
	tenant := fs.String("tenant", "", "import into this `TENANT` of serve")
	session := fs.String("session", "", "import only the session `ID` of the archive")
	replace := fs.Bool("replace", false, "replace the sessions the store holds already")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), importUsage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fail(2, "want exactly one archive FILE")
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	a, err := readArchive(pos[0])
	if err != nil {
		return err
	}
	store, closeStore, err := openStorage(*storeURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	view, err := tenantView(store, *tenant)
	if err != nil {
		return err
	}
	rep, err := archive.Import(ctx, view, a, archive.ImportOptions{Replace: *replace, Only: *session})
	if *asJSON {
		if perr := printJSON(env, rep); perr != nil {
			return perr
		}
	} else if len(rep.Sessions) > 0 || err == nil {
		fmt.Fprintf(env.Stdout, "imported %d sessions (%d events, %d replaced) and %d blobs\n", len(rep.Sessions), rep.Events, len(rep.Replaced), rep.Blobs)
	}
	if err != nil {
		return fail(1, "%v", err)
	}
	return nil
}

// readArchive reads and checks an archive file.
func readArchive(path string) (*archive.Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fail(2, "%v", err)
	}
	defer f.Close()
	a, err := archive.Read(f, archive.ReadOptions{})
	if err != nil {
		return nil, fail(1, "%s: %v", path, err)
	}
	return a, nil
}

// archiveSession returns the session id of an archive (the only one, when
// id is "").
func archiveSession(a *archive.Archive, path, id string) (archive.Session, error) {
	if id == "" {
		if len(a.Sessions) != 1 {
			ids := make([]string, len(a.Sessions))
			for i, s := range a.Sessions {
				ids[i] = s.ID
			}
			return archive.Session{}, fail(2, "%s holds %d sessions (%s): name one", path, len(a.Sessions), strings.Join(ids, ", "))
		}
		return a.Sessions[0], nil
	}
	s, ok := a.Session(id)
	if !ok {
		return archive.Session{}, fail(1, "%s holds no session %s", path, id)
	}
	return s, nil
}
