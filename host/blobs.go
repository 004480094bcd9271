package host

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Blobs by reference: when the storage implements storage.Blobs, a
// message's parts and a tool's output longer than Options.BlobThreshold
// are put in the blob store before their event is appended, and the event
// keeps the digest, the media type and the size (ledger.Part.Blob,
// ledger.ToolResult.OutputBlob). Whatever needs the bytes resolves the
// events first (resolveEvents): the model's request (so that it is what
// it would have been with the bytes inline), compaction, transcripts.

// DefaultBlobThreshold is Options.BlobThreshold when it is 0.
const DefaultBlobThreshold = 64 << 10

// blobPreviewBytes bounds the preview a tool result keeps in Output when
// its whole output is in a blob.
const blobPreviewBytes = 1 << 10

// blobCacheBytes bounds the bytes of the blobs a run keeps in memory, so
// that each of its passes does not read its attachments again (each
// request holds them anyway).
const blobCacheBytes = 64 << 20

// BlobQuotaError is returned by a send whose parts the blob store may not
// take (see Options.BlobQuota and Options.MaxBlobBytes); nothing was
// appended. It matches [ErrBlobQuota].
type BlobQuotaError struct {
	// Limit names the bound: "quota" (Options.BlobQuota, the bytes of
	// every blob of the storage) or "size" (Options.MaxBlobBytes, one
	// part).
	Limit string
	// Max is the bound in bytes.
	Max int64
	// Used is the bytes of the blobs already stored (for "quota").
	Used int64
	// Size is the bytes the message would add (for "quota") or the
	// part's (for "size").
	Size int64
}

// Error says which bound the message passes, and by how much.
func (e *BlobQuotaError) Error() string {
	if e.Limit == "size" {
		return fmt.Sprintf("host: a part of %d bytes is larger than the largest blob allowed (%d bytes)", e.Size, e.Max)
	}
	return fmt.Sprintf("host: the message's parts (%d bytes) would bring the stored blobs to %d bytes, past the blob quota of %d bytes (%d used)",
		e.Size, e.Used+e.Size, e.Max, e.Used)
}

// Is makes a *BlobQuotaError match ErrBlobQuota.
func (e *BlobQuotaError) Is(target error) bool { return target == ErrBlobQuota }

// blobStore returns the blob store of the session's storage, or nil when
// parts are kept inline: the storage keeps no blobs, or the threshold is
// off.
func (h *Host) blobStore(store storage.Storage) storage.Blobs {
	if h.blobThreshold <= 0 {
		return nil
	}
	b, _ := store.(storage.Blobs)
	return b
}

// externalParts returns parts with the bytes of each part longer than the
// threshold put in the blob store and referred to (a copy: parts is left
// as it was). A part that names a blob already must name one the store
// holds. The bounds (Options.MaxBlobBytes, Options.BlobQuota) are checked
// before anything is put. Every blob the parts name or put is held (see
// HoldBlobs) until the caller calls release, once the message's event is
// appended (or will not be): no sweep deletes it meanwhile.
func (h *Host) externalParts(ctx context.Context, store storage.Storage, parts []ledger.Part) (_ []ledger.Part, release func(), err error) {
	release = func() {}
	blobs := h.blobStore(store)
	if blobs != nil {
		// Until every live host reads references to blobs, bytes stay
		// inline; a part that names a blob already cannot.
		if err := h.featuresWritable(ledger.FeatureBlob); err != nil {
			if slices.ContainsFunc(parts, func(p ledger.Part) bool { return p.Blob != "" }) {
				return nil, release, err
			}
			return parts, release, nil
		}
	}
	if blobs == nil {
		for _, p := range parts {
			if p.Blob != "" {
				return nil, release, fmt.Errorf("%w: a %s part names blob %.80s, and the host keeps no blobs (its storage has none, or Options.BlobThreshold is -1)", ErrInvalidInput, p.Type, p.Blob)
			}
		}
		return parts, release, nil
	}
	var digests []string
	for _, p := range parts {
		switch {
		case p.Blob != "":
			if storage.CheckBlobDigest(p.Blob) == nil {
				digests = append(digests, p.Blob)
			}
		case int64(len(p.Data)) > h.blobThreshold && p.Type != ledger.PartText:
			if h.maxBlob <= 0 || int64(len(p.Data)) <= h.maxBlob {
				digests = append(digests, storage.BlobDigest(p.Data))
			}
		}
	}
	if release, err = HoldBlobs(ctx, store, digests); err != nil {
		return nil, func() {}, err
	}
	defer func() {
		if err != nil {
			release()
			release = func() {}
		}
	}()
	out, err := h.putParts(ctx, blobs, parts)
	return out, release, err
}

// putParts is externalParts once the blobs are held.
func (h *Host) putParts(ctx context.Context, blobs storage.Blobs, parts []ledger.Part) ([]ledger.Part, error) {
	var out []ledger.Part
	var need map[string]int64 // digest → size, of the parts to put
	for i, p := range parts {
		big := int64(len(p.Data)) > h.blobThreshold && p.Type != ledger.PartText
		if p.Blob == "" && !big {
			continue
		}
		if out == nil {
			out = append([]ledger.Part(nil), parts...)
		}
		if p.Blob != "" {
			if len(p.Data) > 0 {
				return nil, fmt.Errorf("%w: a %s part has both data and a blob", ErrInvalidInput, p.Type)
			}
			if err := storage.CheckBlobDigest(p.Blob); err != nil {
				return nil, fmt.Errorf("%w: a %s part: %w", ErrInvalidInput, p.Type, err)
			}
			data, ok, err := blobs.GetBlob(ctx, p.Blob)
			if err != nil {
				return nil, fmt.Errorf("host: read blob %s: %w", p.Blob, err)
			}
			if !ok {
				return nil, fmt.Errorf("%w: a %s part names blob %.80s, which the storage does not hold", ErrInvalidInput, p.Type, p.Blob)
			}
			// Put again, so that its Stored time is now: a sweep spares
			// it while the message's event is being appended.
			if _, err := blobs.PutBlob(ctx, data); err != nil {
				return nil, fmt.Errorf("host: put blob %s again: %w", p.Blob, err)
			}
			out[i].Size = int64(len(data))
			continue
		}
		if h.maxBlob > 0 && int64(len(p.Data)) > h.maxBlob {
			return nil, &BlobQuotaError{Limit: "size", Max: h.maxBlob, Size: int64(len(p.Data))}
		}
		if need == nil {
			need = map[string]int64{}
		}
		need[storage.BlobDigest(p.Data)] = int64(len(p.Data))
	}
	if out == nil {
		return parts, nil
	}
	if h.blobQuota > 0 && len(need) > 0 {
		// The quota is checked and the message's bytes reserved under one
		// lock, and the reservation is given back once they are put: sends
		// at once on this host cannot all pass the quota (the listing
		// counts what was put, the reservations what is being put).
		held, err := h.reserveBlobs(ctx, blobs, need)
		if err != nil {
			return nil, err
		}
		defer h.unreserveBlobs(held)
	}
	for i := range out {
		p := &out[i]
		if p.Blob != "" || int64(len(p.Data)) <= h.blobThreshold || p.Type == ledger.PartText {
			continue
		}
		d, err := blobs.PutBlob(ctx, p.Data)
		if err != nil {
			return nil, fmt.Errorf("host: put a %s part in the blob store: %w", p.Type, err)
		}
		p.Blob, p.Size, p.Data = d, int64(len(p.Data)), nil
	}
	return out, nil
}

// reserveBlobs checks that the bytes of need the store does not hold yet
// fit in the quota beside the stored blobs and the blobs other sends of
// this host reserved and are putting (the same bytes reserved by two
// sends count once: they are stored once), and reserves them; it returns
// the digests it reserved, for unreserveBlobs once they are put (or not).
func (h *Host) reserveBlobs(ctx context.Context, blobs storage.Blobs, need map[string]int64) ([]string, error) {
	h.blobMu.Lock()
	defer h.blobMu.Unlock()
	infos, err := blobs.ListBlobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: list blobs for the quota: %w", err)
	}
	var used, reserved, add int64
	stored := make(map[string]bool, len(infos))
	for _, in := range infos {
		used += in.Size
		stored[in.Digest] = true
	}
	for d, r := range h.blobReserved {
		if !stored[d] {
			reserved += r.size
		}
	}
	var held []string
	for d, n := range need {
		if stored[d] {
			continue
		}
		held = append(held, d)
		if _, ok := h.blobReserved[d]; !ok {
			add += n
		}
	}
	if add > 0 && used+reserved+add > h.blobQuota {
		return nil, &BlobQuotaError{Limit: "quota", Max: h.blobQuota, Used: used + reserved, Size: add}
	}
	if h.blobReserved == nil {
		h.blobReserved = map[string]blobReservation{}
	}
	for _, d := range held {
		r := h.blobReserved[d]
		r.size, r.sends = need[d], r.sends+1
		h.blobReserved[d] = r
	}
	return held, nil
}

// blobReservation is a new blob that sends of this host are putting.
type blobReservation struct {
	size  int64
	sends int // the sends putting it
}

// unreserveBlobs gives back what reserveBlobs reserved.
func (h *Host) unreserveBlobs(held []string) {
	h.blobMu.Lock()
	defer h.blobMu.Unlock()
	for _, d := range held {
		r := h.blobReserved[d]
		if r.sends--; r.sends <= 0 {
			delete(h.blobReserved, d)
		} else {
			h.blobReserved[d] = r
		}
	}
}

// externalOutput puts a tool's output in the blob store when it is longer
// than the threshold, and refers to it from the result, whose Output keeps
// a preview. When the put fails, the output stays inline (and the failure
// is logged): a result is never lost to the blob store. The blob is held
// (see HoldBlobs) until the caller calls release, once the result's event
// is appended.
func (r *run) externalOutput(result *ledger.ToolResult) (release func()) {
	release = func() {}
	blobs := r.h.blobStore(r.st.store)
	if blobs == nil || int64(len(result.Output)) <= r.h.blobThreshold || r.h.featuresWritable(ledger.FeatureBlob) != nil {
		return release
	}
	ctx, stop := newAppendCtx(r.h.timeouts.Append)
	defer stop()
	data := []byte(result.Output)
	rel, err := HoldBlobs(ctx, r.st.store, []string{storage.BlobDigest(data)})
	var d string
	if err == nil {
		release = rel
		d, err = blobs.PutBlob(ctx, data)
	}
	if err != nil {
		release()
		r.h.log.Warn("cannot put a tool output in the blob store; it stays in the ledger", "session", r.sessionID, "run", r.id,
			"tool", result.Name, "bytes", len(data), "err", err)
		return func() {}
	}
	r.blobs.add(d, data)
	result.OutputBlob, result.OutputSize, result.Output = d, int64(len(data)), preview(result.Output, blobPreviewBytes)
	return release
}

// preview returns s's first n bytes at most, cut at a rune boundary.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ResolveBlobs returns events with every blob they refer to (see
// Options.BlobThreshold) read back from store into them: each part's
// bytes in Data and each tool output whole in Output, the references
// cleared, so that the events are what they would have been with the
// bytes inline; events that refer to none are shared, not copied. A blob
// the store cannot give (a store without storage.Blobs, a blob deleted)
// leaves its reference in place. It is what a program reading a ledger
// without a host (a transcript, a replay of plugin calls) uses.
func ResolveBlobs(ctx context.Context, store storage.Storage, events []ledger.Event) ([]ledger.Event, error) {
	return resolveEvents(ctx, store, nil, events, true)
}

// resolveEvents returns events with every blob they refer to read back
// into them: each part's bytes in Data and each tool output whole in
// Output, the references cleared, so that the events are what they would
// have been with the bytes inline. It returns events itself when none
// refers to a blob, and shares every event it does not change.
//
// For the model (forCaller unset), a blob the storage no longer holds (a
// sweep, an operator) becomes words that say so: the part a text part,
// the output its preview and a line, so that the session goes on and the
// model knows what it lacks; an error reading the storage fails it (the
// run is left interrupted, resumable). For a caller (forCaller set: a
// transcript), a blob it cannot read keeps its reference, and the bytes
// are copies the caller may keep and change. cache, when not nil, keeps
// what was read for the next call.
func resolveEvents(ctx context.Context, store storage.Storage, cache *blobCache, events []ledger.Event, forCaller bool) ([]ledger.Event, error) {
	first := -1
	for i := range events {
		if events[i].Input != nil || events[i].ToolResult != nil {
			if len(events[i].BlobRefs()) > 0 {
				first = i
				break
			}
		}
	}
	if first < 0 {
		return events, nil
	}
	blobs, _ := store.(storage.Blobs)
	// get returns the blob's bytes; found is false for a blob the
	// storage does not hold (or a storage without blobs).
	get := func(e *ledger.Event, digest string) (data []byte, found bool, err error) {
		if data, ok := cache.get(digest); ok {
			return data, true, nil
		}
		if blobs == nil {
			return nil, false, nil
		}
		data, ok, err := blobs.GetBlob(ctx, digest)
		if err != nil {
			if forCaller {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("host: event %s refers to blob %s: %w", e.ID, digest, err)
		}
		if ok {
			cache.add(digest, data)
		}
		return data, ok, nil
	}
	out := append([]ledger.Event(nil), events...)
	for i := first; i < len(out); i++ {
		e := &out[i]
		if in := e.Input; in != nil && len(e.BlobRefs()) > 0 {
			c := *in
			c.Parts = append([]ledger.Part(nil), in.Parts...)
			for j := range c.Parts {
				p := &c.Parts[j]
				if p.Blob == "" {
					continue
				}
				data, ok, err := get(e, p.Blob)
				switch {
				case err != nil:
					return nil, err
				case ok && forCaller:
					p.Data, p.Blob, p.Size = bytes.Clone(data), "", 0
				case ok:
					p.Data, p.Blob, p.Size = data, "", 0
				case !forCaller:
					*p = ledger.TextPart(missingPart(*p))
				}
			}
			e.Input = &c
		}
		if r := e.ToolResult; r != nil && r.OutputBlob != "" {
			data, ok, err := get(e, r.OutputBlob)
			switch {
			case err != nil:
				return nil, err
			case ok:
				c := *r
				c.Output, c.OutputBlob, c.OutputSize = string(data), "", 0
				e.ToolResult = &c
			case !forCaller:
				c := *r
				c.Output = fmt.Sprintf("%s\n[the rest of this output, %d bytes in all, is no longer stored]", r.Output, r.OutputSize)
				c.OutputBlob, c.OutputSize = "", 0
				e.ToolResult = &c
			}
		}
	}
	return out, nil
}

// missingPart is what the model reads in place of a part whose blob the
// storage no longer holds.
func missingPart(p ledger.Part) string {
	what := string(p.Type)
	if p.Name != "" {
		what += " " + p.Name
	}
	return fmt.Sprintf("[%s (%s, %d bytes) was attached here; it is no longer stored]", what, p.MIME, p.Size)
}

// blobCache keeps the bytes of the blobs a run put or read, up to
// blobCacheBytes, the least recently used dropped first. A digest names
// its bytes, whatever store holds them.
type blobCache struct {
	mu    sync.Mutex
	size  int64
	order *list.List // of *cached, most recent first
	byKey map[string]*list.Element
}

type cached struct {
	digest string
	data   []byte
}

func (c *blobCache) get(digest string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[digest]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached).data, true
}

// add keeps data under digest; the cache never modifies it, nor may the
// caller afterwards.
func (c *blobCache) add(digest string, data []byte) {
	if c == nil || int64(len(data)) > blobCacheBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey, c.order = map[string]*list.Element{}, list.New()
	}
	if el, ok := c.byKey[digest]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.byKey[digest] = c.order.PushFront(&cached{digest, data})
	c.size += int64(len(data))
	for c.size > blobCacheBytes {
		last := c.order.Back()
		v := last.Value.(*cached)
		c.order.Remove(last)
		delete(c.byKey, v.digest)
		c.size -= int64(len(v.data))
	}
}
