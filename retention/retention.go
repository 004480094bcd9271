// Package retention removes the closed sessions a policy no longer keeps:
// older than so many days, or past the most recent so many, each either
// archived (a portable archive per session, package storage/archive) and
// then deleted, or deleted.
//
// A [Sweep] is safe on every host at once and idempotent. It never touches
// a session in use: one with a run in progress or queued messages, a run
// parked for approvals, an interrupted run (a host's resume may pick it
// up), or a lease another host holds. It holds each session it removes as
// every operation that removes data does (host.Session.Delete with a
// check): from its last look at the session to its deletion, and it
// deletes only the ledger it checked (and archived), so that a message
// sent meanwhile, on any host, keeps the session (it is skipped: "it
// changed while it was swept") and is never lost. Two sweeps never both
// act on one session. A second sweep finds nothing more to do.
//
// A session may override the policy (see [SetOverride]): keep it whatever
// the policy says, or keep it its own number of days. Overrides live in
// the storage's key-value store, namespace "retention", by session id.
package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
)

// Action is what a sweep does with a session past the policy.
type Action string

// The actions.
const (
	// ActionArchive writes the session to Policy.ArchiveDir, then
	// deletes it.
	ActionArchive Action = "archive"
	// ActionDelete deletes it.
	ActionDelete Action = "delete"
)

// Policy is what a sweep keeps. A session goes once it passes any limit
// set; with none set, nothing goes.
type Policy struct {
	// KeepDays keeps a closed session this many days after its last
	// event. Default 0: no limit by age.
	KeepDays int
	// KeepLast keeps the most recent this many closed sessions (by their
	// last event). Default 0: no limit by count.
	KeepLast int
	// Action is what happens to a session past a limit. Default
	// ActionArchive.
	Action Action
	// ArchiveDir receives one archive per session, <id>.tar.gz, which
	// agentic-host transcript --archive reads and agentic-host import
	// imports again. Required with ActionArchive.
	ArchiveDir string
}

// Check reports what is wrong with the policy, every problem joined.
func (p Policy) Check() error {
	var errs []error
	if p.KeepDays < 0 || p.KeepLast < 0 {
		errs = append(errs, errors.New("retention: keep_days and keep_last must not be negative"))
	}
	switch p.Action {
	case "", ActionArchive:
		if p.ArchiveDir == "" {
			errs = append(errs, errors.New("retention: the archive action needs an archive_dir"))
		}
	case ActionDelete:
	default:
		errs = append(errs, fmt.Errorf("retention: action %q: want archive or delete", p.Action))
	}
	return errors.Join(errs...)
}

// Namespace is the key-value namespace of the sessions' overrides.
const Namespace = "retention"

// Override is a session's own retention, which wins over the policy.
type Override struct {
	// Keep keeps the session whatever the policy says.
	Keep bool `json:"keep,omitempty"`
	// KeepDays, when above 0, keeps the session this many days after
	// its last event, instead of the policy's limits (it is not counted
	// in KeepLast either).
	KeepDays int `json:"keep_days,omitempty"`
}

// SetOverride records a session's override in kv (the storage of the
// session's host); the zero Override removes it.
func SetOverride(ctx context.Context, kv storage.KV, sessionID string, o Override) error {
	if o.KeepDays < 0 {
		return errors.New("retention: keep_days must not be negative")
	}
	if o == (Override{}) {
		return kv.Delete(ctx, Namespace, sessionID)
	}
	b, _ := json.Marshal(o)
	return kv.Set(ctx, Namespace, sessionID, b)
}

// GetOverride returns a session's override; the zero Override when it has
// none.
func GetOverride(ctx context.Context, kv storage.KV, sessionID string) (Override, error) {
	var o Override
	b, ok, err := kv.Get(ctx, Namespace, sessionID)
	if err != nil || !ok {
		return o, err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return Override{}, fmt.Errorf("retention: the override of session %s: %w", sessionID, err)
	}
	return o, nil
}

// Options are what a sweep works on.
type Options struct {
	// Host is the host of the sessions (its storage: Storage below).
	Host *host.Host
	// Storage is the host's storage; it must implement storage.Lister
	// and storage.Deleter.
	Storage storage.Storage
	// Policy is what to keep.
	Policy Policy
	// Tenant is recorded in the archives' manifests. Default "".
	Tenant string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives what the sweep did. Default slog.Default().
	Logger *slog.Logger
	// BlobGrace is the grace of the sweep of unreferenced blobs at the
	// sweep's end (host.BlobSweepOptions.Grace). Default: 0, which means
	// an hour (host.DefaultBlobGrace); -1 spares only the blobs put since
	// that sweep began.
	BlobGrace time.Duration
}

// Skip is a session a sweep left although the policy would remove it.
type Skip struct {
	Session string `json:"session"`
	Reason  string `json:"reason"`
}

// Report tells what a sweep did.
type Report struct {
	// Archived and Deleted are the sessions archived (and deleted) and
	// deleted.
	Archived []string `json:"archived"`
	Deleted  []string `json:"deleted"`
	// Skipped are the sessions past the policy that the sweep left, and
	// why (in use, leased by another host, being swept elsewhere).
	Skipped []Skip `json:"skipped"`
	// Kept counts the sessions the policy keeps.
	Kept int `json:"kept"`
	// Errors are the failures, one per session; the sweep goes on.
	Errors []string `json:"errors"`
	// Blobs and BlobBytes count the blobs (of a storage that keeps them)
	// that the sweep deleted at its end because no event refers to them
	// any more: those of the sessions it deleted (whatever their age),
	// and any other stored before the grace (Options.BlobGrace), such as
	// one a host left when it stopped between putting a blob and
	// appending its event.
	Blobs     int   `json:"blobs"`
	BlobBytes int64 `json:"blob_bytes"`
}

// sweeping names the sessions a sweep of this process is acting on, so
// that two sweeps of one process (on a storage without leases) never act
// on the same one.
var sweeping sync.Map

// sweepKey names a session of a storage in sweeping.
type sweepKey struct {
	store storage.Storage
	id    string
}

// candidate is a session, with its last event's time, and whether a run
// of it is open or messages wait in it.
type candidate struct {
	id   string
	last time.Time
	open bool
	o    Override
}

// Sweep applies the policy once: it lists the sessions, keeps those the
// policy (or their override) keeps and those in use, and archives or
// deletes the others. It returns what it did; its error is for failures
// that stopped it (the listing), each session's failure being in the
// report.
func Sweep(ctx context.Context, opts Options) (Report, error) {
	rep := Report{Archived: []string{}, Deleted: []string{}, Skipped: []Skip{}, Errors: []string{}}
	if err := opts.Policy.Check(); err != nil {
		return rep, err
	}
	lister, ok1 := opts.Storage.(storage.Lister)
	_, ok2 := opts.Storage.(storage.Deleter)
	if !ok1 || !ok2 || opts.Host == nil {
		return rep, fmt.Errorf("retention: a sweep needs a host and a storage that lists and deletes sessions (storage.Lister, storage.Deleter); %T does not", opts.Storage)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	log := cmp.Or(opts.Logger, slog.Default())
	p := opts.Policy
	if p.KeepDays == 0 && p.KeepLast == 0 {
		return rep, nil
	}
	kv, _ := opts.Storage.(storage.KV)
	ids, err := lister.ListSessions(ctx)
	if err != nil {
		return rep, fmt.Errorf("retention: list sessions: %w", err)
	}
	var closed []candidate
	for _, id := range ids {
		if kv != nil {
			o, err := GetOverride(ctx, kv, id)
			if err != nil {
				rep.Errors = append(rep.Errors, err.Error())
				continue
			}
			if o.Keep {
				rep.Kept++
				continue
			}
			if o.KeepDays > 0 {
				closed = append(closed, candidate{id: id, o: o})
				continue
			}
		}
		closed = append(closed, candidate{id: id})
	}
	// The last event of each.
	for i := range closed {
		events, err := opts.Storage.Load(ctx, closed[i].id)
		if err != nil || len(events) == 0 {
			continue // damaged, or gone: left as it is
		}
		closed[i].last = events[len(events)-1].Time
		closed[i].open = len(ledger.OpenRuns(events)) > 0 || len(ledger.PendingInputs(events)) > 0
	}
	closed = slices.DeleteFunc(closed, func(c candidate) bool { return c.last.IsZero() })
	slices.SortFunc(closed, func(a, b candidate) int { return b.last.Compare(a.last) })
	t := now()
	rank := 0
	var expired []candidate
	for _, c := range closed {
		if c.o.KeepDays > 0 {
			if t.Sub(c.last) > time.Duration(c.o.KeepDays)*24*time.Hour {
				expired = append(expired, c)
			} else {
				rep.Kept++
			}
			continue
		}
		old := p.KeepDays > 0 && t.Sub(c.last) > time.Duration(p.KeepDays)*24*time.Hour
		if c.open {
			// Not closed: not counted in KeepLast; past KeepDays, it
			// is reported skipped, with why.
			if old {
				expired = append(expired, c)
			} else {
				rep.Kept++
			}
			continue
		}
		rank++
		many := p.KeepLast > 0 && rank > p.KeepLast
		if old || many {
			expired = append(expired, c)
		} else {
			rep.Kept++
		}
	}
	var refs []string // the blobs the deleted sessions referred to
	for _, c := range expired {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		act(ctx, opts, c.id, c.last, &rep, &refs, log)
	}
	if _, ok := opts.Storage.(storage.Blobs); ok {
		// The deleted sessions' blobs go at once (but for those another
		// session refers to), then any orphan past the grace: two reads
		// of the ledgers' references, however many sessions went.
		sweeps := []host.BlobSweepOptions{{Grace: opts.BlobGrace}}
		if len(refs) > 0 {
			sweeps = append([]host.BlobSweepOptions{{Grace: -1, Only: refs}}, sweeps...)
		}
		for _, o := range sweeps {
			swept, err := host.SweepBlobs(ctx, opts.Storage, o)
			rep.Blobs += swept.Deleted
			rep.BlobBytes += swept.DeletedBytes
			if err != nil {
				rep.Errors = append(rep.Errors, err.Error())
			}
		}
	}
	return rep, nil
}

// act archives or deletes one session past the policy (its last event at
// last, when the sweep decided), unless it is in use or changed since,
// records what it did in rep, and adds the blobs the session it deleted
// referred to to refs.
func act(ctx context.Context, opts Options, id string, last time.Time, rep *Report, refs *[]string, log *slog.Logger) {
	// A storage of a type that cannot be a map key (a struct holding a
	// slice) goes without this guard: its leases, if any, still hold.
	if reflect.TypeOf(opts.Storage).Comparable() {
		key := sweepKey{opts.Storage, id}
		if _, busy := sweeping.LoadOrStore(key, true); busy {
			rep.Skipped = append(rep.Skipped, Skip{Session: id, Reason: "another sweep of this process is acting on it"})
			return
		}
		defer sweeping.Delete(key)
	}
	skip := func(reason string) { rep.Skipped = append(rep.Skipped, Skip{Session: id, Reason: reason}) }
	fail := func(err error) {
		rep.Errors = append(rep.Errors, fmt.Sprintf("session %s: %v", id, err))
		log.Warn("retention: a session was not swept", "session", id, "err", err)
	}
	if opts.Host.IsRunning(id) {
		skip("a run is in progress")
		return
	}
	archiving := cmp.Or(opts.Policy.Action, ActionArchive) == ActionArchive
	var (
		archived *pendingArchive
		deleted  []ledger.Event
		skipped  string
		errGone  = errors.New("swept meanwhile")
		errSkip  = errors.New("skip")
	)
	// The session is held from here to its deletion (host.Session.Delete:
	// its lock, its lease, its version): the checks below see the ledger
	// that is deleted, and the archive holds exactly that ledger. A
	// message appended meanwhile (another host's, which the lease does not
	// refuse) makes the deletion refuse, and the session is skipped.
	check := func(ctx context.Context, events []ledger.Event) error {
		if len(events) == 0 {
			return errGone
		}
		if !events[len(events)-1].Time.Equal(last) {
			// Appended to since the sweep decided: decide again next time.
			skipped = "it changed while it was swept"
			return errSkip
		}
		st, err := opts.Host.Session(id).Status(ctx)
		if err != nil {
			return err
		}
		open := len(ledger.OpenRuns(events)) > 0
		switch {
		case st.State == host.StateApprovalRequired:
			skipped = "its run waits for approvals"
		case open || st.State == host.StateRunning || st.State == host.StateInterrupted:
			state := cmp.Or(st.State, host.StateInterrupted)
			if state == host.StateRunning && !opts.Host.IsRunning(id) {
				// Led by no run here: the lease is the one this sweep holds
				// to delete the session (another host's would have stopped
				// it before), and the run was interrupted.
				state = host.StateInterrupted
			}
			skipped = "its run is " + string(state)
		case len(ledger.PendingInputs(events)) > 0:
			skipped = "messages wait in it"
		}
		if skipped != "" {
			return errSkip
		}
		if archiving {
			a, err := writeArchive(ctx, opts, id, events)
			if err != nil {
				return fmt.Errorf("archive: %w", err)
			}
			archived = a
		}
		deleted = events
		return nil
	}
	_, err := opts.Host.Session(id).Delete(ctx, host.DeleteOptions{KeepBlobs: true, Check: check})
	if err != nil && archived != nil {
		archived.discard()
	}
	inUse, isInUse := errors.AsType[*host.InUseError](err)
	switch {
	case errors.Is(err, errGone):
		return // swept meanwhile
	case errors.Is(err, errSkip):
		skip(skipped)
		return
	case isInUse && inUse.Holder != "":
		skip("its lease is held by " + inUse.Holder)
		return
	case isInUse && inUse.State == host.StateApprovalRequired:
		skip("its run waits for approvals")
		return
	case isInUse:
		skip("its run is " + string(inUse.State))
		return
	case errors.Is(err, host.ErrSessionChanged):
		skip("it changed while it was swept")
		return
	case err != nil:
		fail(err)
		return
	}
	if archived != nil {
		// Deleted: the archive takes its place. Should this fail, the
		// archive is whole and durable under its temporary name.
		if err := archived.commit(); err != nil {
			fail(fmt.Errorf("the session is deleted, and its archive is whole, but not in place: %w", err))
			return
		}
	}
	*refs = append(*refs, ledger.BlobRefs(deleted)...)
	if kv, ok := opts.Storage.(storage.KV); ok {
		if err := kv.Delete(ctx, Namespace, id); err != nil {
			fail(err)
		}
	}
	if archiving {
		rep.Archived = append(rep.Archived, id)
	} else {
		rep.Deleted = append(rep.Deleted, id)
	}
	log.Info("retention: session swept", "session", id, "archived", archiving)
}

// pendingArchive is a session's archive written whole and durable under a
// temporary name, put in place once the session is deleted.
type pendingArchive struct {
	tmp, path string
}

// commit renames the archive into place, and makes the rename durable.
func (a *pendingArchive) commit() error {
	if err := os.Rename(a.tmp, a.path); err != nil {
		return fmt.Errorf("archive %s: %w", a.tmp, err)
	}
	if d, err := os.Open(filepath.Dir(a.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// discard removes the archive of a session that was not deleted.
func (a *pendingArchive) discard() { os.Remove(a.tmp) }

// writeArchive writes the archive of a session whose ledger is events,
// DIR/<id>.tar.gz, to a temporary file in DIR, fsynced: commit puts it in
// place (so an archive there is whole, and is of a session deleted).
func writeArchive(ctx context.Context, opts Options, id string, events []ledger.Event) (*pendingArchive, error) {
	dir := opts.Policy.ArchiveDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, "."+id+".*")
	if err != nil {
		return nil, err
	}
	aw := archive.NewWriter(tmp, opts.Tenant)
	err = archive.ExportEvents(ctx, opts.Storage, id, events, aw)
	if err == nil {
		err = aw.Close()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	return &pendingArchive{tmp: tmp.Name(), path: filepath.Join(dir, id+".tar.gz")}, nil
}
