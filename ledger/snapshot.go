package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
)

// A Snapshot stands for the events of a ledger before a cut, so that
// answering a message and resuming a run need read only the events after
// the cut (a session of 100,000 events costs what one of its last
// compaction's span costs). Its [Snapshot.View] of the events after the
// cut — the events before it that those reads still need, then the events
// after it — gives the same answers as the whole ledger to what the host
// reads on those paths: the pending messages and the open and parked runs,
// with every event of theirs ([PendingInputs], [OpenRuns], [Parked],
// [ProjectRun] of any such run); the model's replay ([ReplayMessages]) of
// the view and of every prefix of it that ends after the last compaction,
// provided that the cut is at or before that compaction's Through event
// ([SnapshotCut]); the fork record. What it cannot answer from the view it answers by maybe:
// whether a request id, a message id or a tool call id was used before the
// cut ([Snapshot.MayHoldRequest] and the others: a set that never says no
// to an id it holds and wrongly says yes to about 1% of the others, when
// the caller reads the whole ledger), and which ledger features the events
// before the cut use ([Snapshot.Features]). A view whose pending messages
// may be aliases of messages before the cut answers nothing reliably
// ([Snapshot.Suffices]): the caller reads the whole ledger.
//
// Everything else — transcripts, usage over the session, exports, forks,
// the approval requests of runs that ended — reads the whole ledger. The
// ledger stays the truth: a snapshot is derived from it, and a view that
// cannot be trusted is dropped for the whole ledger.
type Snapshot struct {
	// Through is the id of the last event the snapshot stands for: the
	// event just before the cut.
	Through string
	// Events is how many events it stands for.
	Events int
	// Carry holds the events before the cut that the view keeps, in
	// ledger order: the fork record, every event of a run that had not
	// ended by the cut, every message no run had picked up by it (not an
	// alias, see [Aliases]), and every other event without a run id that
	// is not a message.
	Carry []Event
	// features are the features the events before the cut use.
	features []Feature
	// requests, messages and calls are the ids of the events before the
	// cut: the messages' request ids and ids, the tool calls' ids.
	requests, messages, calls idSet
}

// SnapshotCut returns where a snapshot of events may cut them: the index
// of the Through event of the last compaction, so that the view holds all
// the model's replay reads. It returns 0, no cut, without a compaction, or
// when its Through event is not among the events. (A compaction that finds
// the context still too large after the last one may cut before that one,
// and build on the compaction before it: that replay is not the view's,
// and its caller reads the whole ledger.)
func SnapshotCut(events []Event) int {
	for i := len(events) - 1; i >= 0; i-- {
		c := events[i].Compaction
		if c == nil {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			if events[j].ID == c.Through {
				return j
			}
		}
		return 0
	}
	return 0
}

// NewSnapshot returns the snapshot of the events before cut in view. view
// is a ledger's events, or the [Snapshot.View] of prev (whose carried
// events come first: base is their number, len(prev.Carry)); the new
// snapshot stands for what prev stood for and the events of view from
// base to cut. It fails when the cut leaves nothing new to stand for, or
// falls among prev's carried events.
func NewSnapshot(prev *Snapshot, view []Event, base, cut int) (*Snapshot, error) {
	if prev == nil {
		prev, base = &Snapshot{}, 0
	}
	if base != len(prev.Carry) || cut <= base || cut > len(view) {
		return nil, fmt.Errorf("ledger: a snapshot cut at %d of %d events, %d of them carried: nothing new before the cut", cut, len(view), base)
	}
	before := view[:cut]
	ended := map[string]bool{}
	picked := map[string]bool{}
	for _, e := range before {
		if e.RunEnd != nil {
			ended[e.RunID] = true
		}
		for _, id := range inputsOf(e) {
			picked[id] = true
		}
		if e.Input != nil && e.RunID != "" {
			picked[e.Input.MessageID] = true
		}
	}
	aliases := Aliases(before)
	s := &Snapshot{
		Through:  view[cut-1].ID,
		Events:   prev.Events + cut - base,
		features: slices.Clone(prev.features),
		requests: prev.requests.clone(),
		messages: prev.messages.clone(),
		calls:    prev.calls.clone(),
	}
	for i, e := range before {
		keep := false
		switch {
		case e.Kind == KindFork:
			keep = true
		case e.RunID != "":
			keep = !ended[e.RunID]
		case e.Input != nil:
			keep = !picked[e.Input.MessageID] && aliases[e.Input.MessageID] == ""
		default:
			keep = true
		}
		if keep {
			s.Carry = append(s.Carry, e)
		}
		if i < base {
			continue // carried: prev's sets hold its ids already
		}
		for _, f := range e.Features() {
			if !slices.Contains(s.features, f) {
				s.features = append(s.features, f)
			}
		}
		if in := e.Input; in != nil {
			s.messages.add(in.MessageID)
			if in.RequestID != "" {
				s.requests.add(in.RequestID)
			}
		}
		if st := e.Step; st != nil {
			for _, c := range st.ToolCalls {
				s.calls.add(c.ID)
			}
		}
	}
	return s, nil
}

// View returns the events the snapshot keeps, then after: the events of
// the ledger after the snapshot's Through event. The carried events come
// first, in the returned slice's first len(Carry) places.
func (s *Snapshot) View(after []Event) []Event {
	out := make([]Event, 0, len(s.Carry)+len(after))
	return append(append(out, s.Carry...), after...)
}

// Suffices reports whether view, the snapshot's [Snapshot.View], answers
// as the whole ledger does: false when a message of it that no run picked
// up carries a request id the snapshot may hold — it may be a second copy
// of a message before the cut (see [Aliases]), pending in the view and
// not in the ledger.
func (s *Snapshot) Suffices(view []Event) bool {
	for _, id := range PendingInputs(view) {
		for i := range view {
			if in := view[i].Input; in != nil && in.MessageID == id && in.RequestID != "" && s.MayHoldRequest(in.RequestID) {
				return false
			}
		}
	}
	return true
}

// Features returns the features the events the snapshot stands for use
// (carried or not).
func (s *Snapshot) Features() []Feature { return slices.Clone(s.features) }

// MayHoldRequest reports whether a message of the events the snapshot
// stands for may carry the request id: false is certain, true is wrong
// about 1% of the time.
func (s *Snapshot) MayHoldRequest(id string) bool { return s.requests.mayHold(id) }

// MayHoldMessage is [Snapshot.MayHoldRequest] for a message id.
func (s *Snapshot) MayHoldMessage(id string) bool { return s.messages.mayHold(id) }

// MayHoldCall is [Snapshot.MayHoldRequest] for a tool call id of a step.
func (s *Snapshot) MayHoldCall(id string) bool { return s.calls.mayHold(id) }

// wireSnapshot is a snapshot's encoding.
type wireSnapshot struct {
	V        int               `json:"v"`
	Through  string            `json:"through"`
	Events   int               `json:"events"`
	Features []Feature         `json:"features,omitempty"`
	Requests idSet             `json:"requests"`
	Messages idSet             `json:"messages"`
	Calls    idSet             `json:"calls"`
	Carry    []json.RawMessage `json:"carry,omitempty"`
}

// snapshotVersion is the version of a snapshot's encoding: a snapshot of
// another version does not decode (and is taken again).
const snapshotVersion = 1

// EncodeSnapshot returns the snapshot's encoding: JSON, its carried
// events in the ledger's encoding.
func EncodeSnapshot(s *Snapshot) ([]byte, error) {
	w := wireSnapshot{V: snapshotVersion, Through: s.Through, Events: s.Events, Features: s.features,
		Requests: s.requests, Messages: s.messages, Calls: s.calls}
	for _, e := range s.Carry {
		b, err := Encode(e)
		if err != nil {
			return nil, err
		}
		w.Carry = append(w.Carry, b)
	}
	return json.Marshal(w)
}

// DecodeSnapshot reads what [EncodeSnapshot] wrote. A snapshot of another
// version, or one that does not decode, is an error: the caller reads
// the whole ledger.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	var w wireSnapshot
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("ledger: snapshot: %w", err)
	}
	if w.V != snapshotVersion || w.Through == "" || w.Events <= 0 {
		return nil, fmt.Errorf("ledger: snapshot of version %d (through %q, %d events): want version %d", w.V, w.Through, w.Events, snapshotVersion)
	}
	s := &Snapshot{Through: w.Through, Events: w.Events, features: w.Features, requests: w.Requests, messages: w.Messages, calls: w.Calls}
	for _, f := range w.Features {
		if !KnownFeature(f) {
			// Events this build cannot read: the whole ledger says so.
			return nil, fmt.Errorf("ledger: snapshot: %w: the events use feature %q", ErrVersion, f)
		}
	}
	for _, sets := range []idSet{w.Requests, w.Messages, w.Calls} {
		if err := sets.check(); err != nil {
			return nil, fmt.Errorf("ledger: snapshot: %w", err)
		}
	}
	for i, b := range w.Carry {
		e, err := Decode(b)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot: carried event %d: %w", i+1, err)
		}
		s.Carry = append(s.Carry, e)
	}
	return s, nil
}

// idSet is a set of ids that may answer yes wrongly, never no wrongly: a
// list of Bloom filters, each of a fixed capacity, the last one filled
// first (a list so that it grows without the ids it holds).
type idSet []bloom

// bloom is one filter: Bits of M bits, holding N of at most Cap ids, each
// set in k places.
type bloom struct {
	Bits []byte `json:"b"`
	N    int    `json:"n"`
}

// bloomK is how many places an id sets; with 15 bits an id (a filter at
// its capacity), about 0.1% of the ids it does not hold find all theirs
// set, so that the several filters of a large set (each twice the last)
// together answer yes wrongly well under 1% of the time.
const (
	bloomK         = 10
	bloomBitsPerID = 15
	bloomMinBytes  = 1 << 10 // 8,192 bits: 546 ids
	bloomMaxBytes  = 64 << 10
)

func (b *bloom) capacity() int { return len(b.Bits) * 8 / bloomBitsPerID }

// places returns an id's k places in m bits (double hashing of FNV-1a).
func places(id string, m uint64, fn func(uint64) bool) bool {
	h := fnv.New64a()
	h.Write([]byte(id))
	sum := h.Sum64()
	h1, h2 := sum>>32, sum&0xffffffff|1
	for i := range uint64(bloomK) {
		if !fn((h1 + i*h2) % m) {
			return false
		}
	}
	return true
}

func (s *idSet) add(id string) {
	if len(*s) == 0 || (*s)[len(*s)-1].N >= (*s)[len(*s)-1].capacity() {
		size := bloomMinBytes
		if len(*s) > 0 {
			size = min(2*len((*s)[len(*s)-1].Bits), bloomMaxBytes)
		}
		*s = append(*s, bloom{Bits: make([]byte, size)})
	}
	b := &(*s)[len(*s)-1]
	m := uint64(len(b.Bits)) * 8
	places(id, m, func(p uint64) bool {
		b.Bits[p/8] |= 1 << (p % 8)
		return true
	})
	b.N++
}

func (s idSet) mayHold(id string) bool {
	for i := range s {
		b := &s[i]
		m := uint64(len(b.Bits)) * 8
		if places(id, m, func(p uint64) bool { return b.Bits[p/8]&(1<<(p%8)) != 0 }) {
			return true
		}
	}
	return false
}

// clone returns a copy whose last filter (the one still filled) is its own.
func (s idSet) clone() idSet {
	out := slices.Clone(s)
	if n := len(out); n > 0 {
		out[n-1].Bits = slices.Clone(out[n-1].Bits)
	}
	return out
}

// check refuses filters that are not ones this package writes.
func (s idSet) check() error {
	for _, b := range s {
		if len(b.Bits) < bloomMinBytes || len(b.Bits) > bloomMaxBytes || len(b.Bits)&(len(b.Bits)-1) != 0 || b.N < 0 {
			return errors.New("an id set's filter of a size this build does not write")
		}
	}
	return nil
}
