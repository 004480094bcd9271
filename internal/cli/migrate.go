package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// migrateTries bounds the rewrites of one session that an append raced.
const migrateTries = 3

// migrateCmd rewrites every ledger of a store to the current schema
// version, in canonical form.
func migrateCmd(ctx context.Context, args []string, env Env) error {
	fs := newFlags("migrate", env)
	storageURL := fs.String("storage", DefaultStorage, storageHelp)
	dryRun := fs.Bool("dry-run", false, "report what would be rewritten, and write nothing")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: agentic-host migrate [flags]

Rewrite every session's ledger in the store (every tenant's, for serve) to
schema version %d of the event encoding, in canonical form, so that this
build reads it on its fast path. Events already so are left byte for byte:
a second run changes nothing. Stop the hosts that use the store first; on
Redis, a session another host leads is refused and left as it is.

An event this build cannot bring to version %d (one a newer build wrote, a
damaged one) is reported with its session and place, and its session is
left unchanged. The exit code is 0 when every session is current, 1
otherwise.

Flags:
`, ledger.SchemaVersion, ledger.SchemaVersion)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		fs.Usage()
		return fail(2, "migrate takes no arguments, got %q", pos)
	}
	if _, err := newLogger(fs, env); err != nil {
		return err
	}
	if strings.HasPrefix(*storageURL, "memory:") {
		return fail(2, "storage %s keeps nothing between processes: there is nothing to migrate", *storageURL)
	}
	store, closeStore, err := openStorage(*storageURL)
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeStore()
	lister, ok1 := store.(storage.Lister)
	rewriter, ok2 := store.(storage.Rewriter)
	if !ok1 || !ok2 {
		return fail(2, "storage %s cannot list and rewrite its sessions", *storageURL)
	}
	ids, err := lister.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("list the sessions of %s: %w", *storageURL, err)
	}
	slices.Sort(ids)
	verb := "rewrote"
	if *dryRun {
		verb = "would rewrite"
	}
	var events, changed, changedSessions int
	var failed []string
	for _, id := range ids {
		var stats storage.RewriteStats
		var err error
		for range migrateTries {
			stats, err = rewriter.Rewrite(ctx, id, ledger.Upgrade, *dryRun)
			if !errors.Is(err, storage.ErrRewriteRaced) {
				break
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, id)
			fmt.Fprintf(env.Stderr, "agentic-host migrate: session %s: %v\n", id, migrateHint(err))
			continue
		}
		events += stats.Events
		if stats.Changed > 0 {
			changed += stats.Changed
			changedSessions++
			fmt.Fprintf(env.Stdout, "%s session %s: %d of %d events\n", verb, id, stats.Changed, stats.Events)
		}
	}
	summary := fmt.Sprintf("%s: %s, %s", *storageURL, count(len(ids)-len(failed), "session"), count(events, "event"))
	if len(failed) > 0 {
		summary = fmt.Sprintf("%s: %s read (%s, %d not migrated)", *storageURL, count(len(ids)-len(failed), "session"), count(events, "event"), len(failed))
	}
	switch {
	case changed == 0 && len(failed) == 0:
		fmt.Fprintf(env.Stdout, "%s: nothing to migrate, every event is schema version %d in canonical form\n", summary, ledger.SchemaVersion)
	case changed > 0:
		fmt.Fprintf(env.Stdout, "%s: %s %s in %s to schema version %d, canonical\n", summary, verb, count(changed, "event"), count(changedSessions, "session"), ledger.SchemaVersion)
	default:
		fmt.Fprintf(env.Stdout, "%s\n", summary)
	}
	if len(failed) > 0 {
		return fail(1, "%s not migrated (see above); nothing of them was changed", count(len(failed), "session"))
	}
	return nil
}

// migrateHint adds what to do to the errors an operator can act on.
func migrateHint(err error) error {
	var held *storage.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return fmt.Errorf("%w: stop the host that leads it, then run migrate again", err)
	case errors.Is(err, storage.ErrRewriteRaced):
		return fmt.Errorf("%w (%d times): stop the hosts that use the store, then run migrate again", err, migrateTries)
	}
	return err
}

// count returns "1 session", "2 sessions".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
