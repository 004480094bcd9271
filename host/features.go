package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Rolling upgrades: the ledger features the hosts sharing a store agree on.
//
// A build reads the event kinds and fields of its own schema and no newer
// one (its decoder refuses what it does not know rather than misread it).
// During a rolling deploy, old and new builds share a store, and a session
// one of them wrote may be taken over by the other. So each host announces,
// in the store's key-value store, the ledger features it reads
// (ledger.Feature), renewed with its leases; and a host writes an event
// that uses a feature only while every live host announces it. A request
// that needs one meanwhile fails with a *FeatureError naming the hosts that
// lack it; what the host chooses for itself falls back (bytes stay inline
// rather than go to a blob, a plugin call keeps no journal).
//
// A host that meets a session it cannot read all the same (a ledger written
// before it announced, or by a build that does not take part) leaves it to
// a host that can: it never marks it failed, and a message sent to it
// through this host is appended, queued, for a host that reads the session
// to answer (ErrUnreadable).

// HostsNamespace is the key-value namespace where hosts announce the
// ledger features they read: one value per live host (see Agreement).
const HostsNamespace = "hosts"

// ErrFeatureUnavailable is wrapped by a *FeatureError: a live host sharing
// the store does not read a ledger feature that the request needs.
var ErrFeatureUnavailable = errors.New("host: a ledger feature is not read by every live host")

// ErrUnreadable is returned for a session whose ledger this host cannot
// read (an event kind or field of a newer build, or one it cannot decode).
// The host leaves such a session to a host that can: a message sent to it
// is appended all the same, queued (RunResult.MessageID names it), for
// that host to answer.
var ErrUnreadable = errors.New("host: this host cannot read the session's ledger; a host that can will answer")

// FeatureError tells which ledger features a write needs that not every
// live host sharing the store reads, and which hosts lack them. It wraps
// ErrFeatureUnavailable.
type FeatureError struct {
	// Features are the features the write needs that some live host
	// does not announce.
	Features []ledger.Feature
	// Hosts are the live hosts that lack one of them; none while the
	// hosts' announcements cannot be read (a store unreachable).
	Hosts []AnnouncedHost
}

// Error names the features and the hosts that lack them.
func (e *FeatureError) Error() string {
	names := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		names[i] = h.String()
	}
	fs := make([]string, len(e.Features))
	for i, f := range e.Features {
		fs[i] = strconv.Quote(string(f))
	}
	if len(names) == 0 {
		return fmt.Sprintf("host: the ledger feature %s is not written while the hosts' announcements cannot be read (the storage is unreachable?): try again",
			strings.Join(fs, ", "))
	}
	return fmt.Sprintf("host: the ledger feature %s is not read by every host sharing the storage (not by %s): upgrade them, then try again",
		strings.Join(fs, ", "), strings.Join(names, ", "))
}

// Unwrap returns ErrFeatureUnavailable.
func (e *FeatureError) Unwrap() error { return ErrFeatureUnavailable }

// AnnouncedHost is one host's announcement: who it is and the ledger
// features it reads, until when.
type AnnouncedHost struct {
	// ID is the announcement's key, unique per host process.
	ID string `json:"id"`
	// Host names the host (Options.HostID, or the process's).
	Host string `json:"host,omitempty"`
	// Version is the host's build, when it knows it.
	Version string `json:"version,omitempty"`
	// Features are the ledger features the host reads.
	Features []ledger.Feature `json:"features"`
	// Until is when the announcement lapses unless renewed.
	Until time.Time `json:"until"`
}

// String names the host and its version.
func (a AnnouncedHost) String() string {
	s := a.Host
	if s == "" {
		s = a.ID
	}
	if a.Version != "" {
		s += " " + a.Version
	}
	return s
}

// AgreementOptions configures [NewAgreement].
type AgreementOptions struct {
	// Storage is where hosts announce: it must implement storage.KV.
	// Every host sharing the sessions must announce in the same place
	// (serve uses the store's root, not a tenant's view of it).
	Storage storage.Storage
	// Host names this host to the others; Version its build. Optional.
	Host    string
	Version string
	// Features are the ledger features this host announces. Default:
	// every feature of this build (ledger.Features). Announcing fewer
	// keeps every host from writing the others, so that a rollback to a
	// build that lacks them stays possible.
	Features []ledger.Feature
	// TTL is how long an announcement lasts unless renewed; it is
	// renewed every third of it, and the others' announcements are read
	// then. Default DefaultLeaseTTL.
	TTL time.Duration
	// Logger receives what goes wrong in the background. Default
	// slog.Default().
	Logger *slog.Logger
}

// Agreement announces the ledger features a host reads and tells which
// features every live host sharing the store reads: the ones a host may
// write. Hosts of one process share one (serve gives every tenant's host
// the same, through Options.Agreement); a host given none makes its own
// when its store is shared (storage.Leaser and storage.KV). An Agreement
// is safe for concurrent use.
type Agreement struct {
	kv   storage.KV
	self AnnouncedHost
	ttl  time.Duration
	log  *slog.Logger

	state    atomic.Pointer[agreementState]
	lastOK   atomic.Int64 // when a refresh last succeeded, in Unix ns
	refresh  sync.Mutex   // one refresh at a time
	stop     context.CancelFunc
	done     chan struct{}
	closing  sync.Once
	closeErr error
}

// agreementState is what the last refresh found.
type agreementState struct {
	hosts  []AnnouncedHost // the live hosts, this one among them
	agreed []ledger.Feature
}

// NewAgreement announces this host's features and reads the others'
// announcements, then renews and reads them in the background until
// Close. It fails when the store keeps no values, or for options it cannot
// take; a store it cannot reach (a Redis down) only delays the agreement:
// until the others' announcements are read, the host writes no feature.
func NewAgreement(ctx context.Context, opts AgreementOptions) (*Agreement, error) {
	kv, ok := opts.Storage.(storage.KV)
	if !ok {
		return nil, fmt.Errorf("host: NewAgreement needs a storage that keeps values (storage.KV); %T does not", opts.Storage)
	}
	features := opts.Features
	if features == nil {
		features = ledger.Features()
	}
	for _, f := range features {
		if !ledger.KnownFeature(f) {
			return nil, fmt.Errorf("host: AgreementOptions.Features: %q is not a ledger feature of this build (want some of %v)", f, ledger.Features())
		}
	}
	ttl := opts.TTL
	switch {
	case ttl == 0:
		ttl = DefaultLeaseTTL
	case ttl < 30*time.Millisecond:
		return nil, fmt.Errorf("host: AgreementOptions.TTL %s is below 30ms", ttl)
	}
	a := &Agreement{kv: kv, ttl: ttl, log: opts.Logger, done: make(chan struct{}),
		self: AnnouncedHost{ID: ledger.NewID("host"), Host: opts.Host, Version: opts.Version, Features: slices.Clone(features)}}
	if a.log == nil {
		a.log = slog.Default()
	}
	if err := a.Refresh(ctx); err != nil {
		// Until the others can be read, nothing beyond what every build
		// reads is written.
		a.log.Warn("cannot announce the ledger features this host reads yet; writing none of them meanwhile", "err", err)
		a.state.Store(&agreementState{hosts: []AnnouncedHost{a.self}})
	}
	bg, stop := context.WithCancel(context.Background())
	a.stop = stop
	go a.renew(bg)
	return a, nil
}

// renew announces again and reads the others every third of the ttl.
func (a *Agreement) renew(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(a.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, a.ttl/3)
		err := a.Refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.log.Warn("cannot renew this host's announcement of the ledger features it reads", "err", err)
			if time.Since(time.Unix(0, a.lastOK.Load())) > a.ttl {
				// Hosts may have come meanwhile that read less.
				a.state.Store(&agreementState{hosts: a.state.Load().hosts})
			}
		}
	}
}

// Refresh announces this host's features again, for the ttl from now, and
// reads every live host's announcement. Announcements that lapsed more
// than ten ttls ago (their hosts died) are deleted.
func (a *Agreement) Refresh(ctx context.Context) error {
	a.refresh.Lock()
	defer a.refresh.Unlock()
	now := time.Now().UTC()
	self := a.self
	self.Until = now.Add(a.ttl)
	b, err := json.Marshal(self)
	if err != nil {
		return err
	}
	if err := a.kv.Set(ctx, HostsNamespace, self.ID, b); err != nil {
		return fmt.Errorf("host: announce the ledger features this host reads: %w", err)
	}
	keys, err := a.kv.Keys(ctx, HostsNamespace)
	if err != nil {
		return fmt.Errorf("host: read the hosts' announcements: %w", err)
	}
	st := &agreementState{agreed: slices.Clone(self.Features)}
	for _, k := range keys {
		var h AnnouncedHost
		if k == self.ID {
			h = self
		} else {
			v, ok, err := a.kv.Get(ctx, HostsNamespace, k)
			if err != nil {
				return fmt.Errorf("host: read the hosts' announcements: %w", err)
			}
			if !ok {
				continue
			}
			if err := json.Unmarshal(v, &h); err != nil || h.ID != k {
				// Not an announcement this build can read: a host
				// that announces so differently is not trusted to
				// read anything beyond what every build reads.
				h = AnnouncedHost{ID: k, Until: now.Add(a.ttl)}
				a.log.Warn("an unreadable announcement in the hosts' namespace; writing no ledger feature while it stands", "key", k)
			}
		}
		// A host's clock may run behind this one's: its announcement
		// counts for a ttl past its end.
		switch {
		case now.After(h.Until.Add(10 * a.ttl)):
			if err := a.kv.Delete(ctx, HostsNamespace, k); err != nil {
				return fmt.Errorf("host: forget a dead host's announcement: %w", err)
			}
			continue
		case now.After(h.Until.Add(a.ttl)):
			continue
		}
		st.hosts = append(st.hosts, h)
		st.agreed = slices.DeleteFunc(st.agreed, func(f ledger.Feature) bool { return !slices.Contains(h.Features, f) })
	}
	if !slices.ContainsFunc(st.hosts, func(h AnnouncedHost) bool { return h.ID == self.ID }) {
		st.hosts = append(st.hosts, self)
	}
	slices.SortFunc(st.hosts, func(x, y AnnouncedHost) int { return strings.Compare(x.ID, y.ID) })
	a.state.Store(st)
	a.lastOK.Store(now.UnixNano())
	return nil
}

// Hosts returns the live hosts' announcements, this host's among them,
// as the last refresh found them.
func (a *Agreement) Hosts() []AnnouncedHost { return slices.Clone(a.state.Load().hosts) }

// Agreed returns the ledger features every live host reads, in the order
// of ledger.Features: the ones a host may write.
func (a *Agreement) Agreed() []ledger.Feature { return slices.Clone(a.state.Load().agreed) }

// Reads returns the features this host announces.
func (a *Agreement) Reads() []ledger.Feature { return slices.Clone(a.self.Features) }

// Check returns nil when every live host reads the features, else a
// *FeatureError naming the features and the hosts that lack them.
func (a *Agreement) Check(features ...ledger.Feature) error {
	return a.state.Load().check(features)
}

func (s *agreementState) check(features []ledger.Feature) error {
	var missing []ledger.Feature
	for _, f := range features {
		if !slices.Contains(s.agreed, f) && !slices.Contains(missing, f) {
			missing = append(missing, f)
		}
	}
	if missing == nil {
		return nil
	}
	e := &FeatureError{Features: missing}
	for _, h := range s.hosts {
		if slices.ContainsFunc(missing, func(f ledger.Feature) bool { return !slices.Contains(h.Features, f) }) {
			e.Hosts = append(e.Hosts, h)
		}
	}
	return e
}

// Close stops renewing and withdraws this host's announcement, so that the
// features it lacked may be written at once.
func (a *Agreement) Close(ctx context.Context) error {
	a.closing.Do(func() {
		a.stop()
		<-a.done
		a.refresh.Lock()
		defer a.refresh.Unlock()
		if err := a.kv.Delete(ctx, HostsNamespace, a.self.ID); err != nil {
			a.closeErr = fmt.Errorf("host: withdraw this host's announcement: %w", err)
		}
	})
	return a.closeErr
}

// checkWrite returns nil when every live host reads the features the events
// use (see Agreement), or prior (the session's ledger so far, when the
// caller has it, or the view of snap) holds those they do not all read
// already: a host that
// lacks one cannot read that session anyway, and more of it loses nothing
// (a durable call's journal goes on when an older host arrives). Else it
// returns a *FeatureError. A host without an agreement (a store one host
// uses) writes what it reads itself.
func (h *Host) checkWrite(prior []ledger.Event, snap *ledger.Snapshot, events ...ledger.Event) error {
	var need []ledger.Feature
	for i := range events {
		need = append(need, events[i].Features()...)
	}
	if need == nil {
		return nil
	}
	err := h.featuresWritable(need...)
	fe, ok := err.(*FeatureError)
	if !ok || (len(prior) == 0 && snap == nil) {
		return err
	}
	held := map[ledger.Feature]bool{}
	if snap != nil {
		for _, f := range snap.Features() {
			held[f] = true
		}
	}
	for i := range prior {
		for _, f := range prior[i].Features() {
			held[f] = true
		}
	}
	rest := slices.DeleteFunc(slices.Clone(fe.Features), func(f ledger.Feature) bool { return held[f] })
	if len(rest) == 0 {
		return nil
	}
	return h.featuresWritable(rest...)
}

// featuresWritable is checkWrite for the features themselves.
func (h *Host) featuresWritable(features ...ledger.Feature) error {
	if h.agreement != nil {
		return h.agreement.Check(features...)
	}
	var missing []ledger.Feature
	for _, f := range features {
		if !slices.Contains(h.reads, f) {
			missing = append(missing, f)
		}
	}
	if missing != nil {
		return &FeatureError{Features: missing, Hosts: []AnnouncedHost{{ID: h.leaseOwner, Host: h.hostID, Features: h.reads}}}
	}
	return nil
}

// unreadable reports whether err, from loading a session, says that this
// host cannot read its ledger: an event it cannot decode.
func unreadable(err error) bool {
	var de *ledger.DecodeError
	return errors.As(err, &de) || errors.Is(err, ErrUnreadable)
}

// Agreement returns the agreement on ledger features the host writes by
// (Options.Agreement, or its own on a shared store); nil for a host alone
// on its store.
func (h *Host) Agreement() *Agreement { return h.agreement }
