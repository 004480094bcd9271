package storagetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage"
)

// runBlobs checks a [storage.Blobs]: blobs put through a are read through
// b (the same store in Run, two handles on one backend in RunShared).
func runBlobs(t *testing.T, a, b storage.Storage) {
	ba, ok := a.(storage.Blobs)
	if !ok {
		t.Skip("the store does not implement storage.Blobs")
	}
	bb, ok := b.(storage.Blobs)
	if !ok {
		t.Fatal("the second handle does not implement storage.Blobs, the first does")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b storage.Blobs)
	}{
		{"Missing", testBlobsMissing},
		{"RoundTrip", testBlobsRoundTrip},
		{"Dedup", testBlobsDedup},
		{"Refresh", testBlobsRefresh},
		{"Delete", testBlobsDelete},
		{"List", testBlobsList},
		{"Invalid", testBlobsInvalid},
		{"NoAliasing", testBlobsNoAliasing},
		{"Concurrent", testBlobsConcurrent},
		{"DoneContext", testBlobsDoneContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearBlobs(t, ba)
			tc.fn(t, ba, bb)
		})
	}
	t.Run("NotSessionsNorValues", func(t *testing.T) {
		ctx := t.Context()
		d := putOK(t, ba, ctx, []byte("not a session"))
		if l, ok := a.(storage.Lister); ok {
			ids, err := l.ListSessions(ctx)
			if err != nil {
				t.Errorf("ListSessions: %v", err)
			}
			if len(ids) != 0 {
				t.Errorf("ListSessions lists %q: blobs are not sessions", ids)
			}
		}
		if kv, ok := a.(storage.KV); ok {
			for _, ns := range []string{"blobs", d, "sha256"} {
				if keys, err := kv.Keys(ctx, ns); err != nil || len(keys) != 0 {
					t.Errorf("KV Keys(%q) = %q, %v: blobs are not values", ns, keys, err)
				}
			}
		}
	})
	t.Run("Prefix", func(t *testing.T) {
		clearBlobs(t, ba)
		testBlobsPrefix(t, a, b)
	})
}

// clearBlobs deletes the blobs the checks before left, so that each check
// counts its own.
func clearBlobs(t *testing.T, s storage.Blobs) {
	t.Helper()
	ctx := t.Context()
	infos, err := s.ListBlobs(ctx)
	if err != nil {
		t.Fatalf("ListBlobs: %v", err)
	}
	for _, in := range infos {
		if err := s.DeleteBlob(ctx, in.Digest); err != nil {
			t.Fatalf("DeleteBlob(%s): %v", in.Digest, err)
		}
	}
	if infos, err := s.ListBlobs(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("ListBlobs after deleting every blob: %d blobs, %v; want none", len(infos), err)
	}
}

// putOK puts data and checks the digest it returns.
func putOK(t *testing.T, s storage.Blobs, ctx context.Context, data []byte) string {
	t.Helper()
	d, err := s.PutBlob(ctx, data)
	if err != nil {
		t.Fatalf("PutBlob(%d bytes): %v", len(data), err)
	}
	if want := storage.BlobDigest(data); d != want {
		t.Errorf("PutBlob(%d bytes) = %s, want its BlobDigest %s", len(data), d, want)
	}
	return d
}

// wantBlob checks what GetBlob returns; want nil means missing.
func wantBlob(t *testing.T, s storage.Blobs, ctx context.Context, digest string, want []byte, why string) {
	t.Helper()
	got, ok, err := s.GetBlob(ctx, digest)
	switch {
	case err != nil:
		t.Errorf("%s: GetBlob(%.20s…): %v", why, digest, err)
	case want == nil && ok:
		t.Errorf("%s: GetBlob(%.20s…) found %d bytes, want missing", why, digest, len(got))
	case want == nil && got != nil:
		t.Errorf("%s: GetBlob(%.20s…) of a missing blob returned non-nil bytes", why, digest)
	case want != nil && !ok:
		t.Errorf("%s: GetBlob(%.20s…) found nothing, want %d bytes", why, digest, len(want))
	case want != nil && !bytes.Equal(got, want):
		t.Errorf("%s: GetBlob(%.20s…) = %s, want %s", why, digest, short(got), short(want))
	}
}

// listed returns the store's blobs by digest, reporting an unsorted list
// or one that names a blob twice.
func listed(t *testing.T, s storage.Blobs, ctx context.Context) map[string]storage.BlobInfo {
	t.Helper()
	infos, err := s.ListBlobs(ctx)
	if err != nil {
		t.Fatalf("ListBlobs: %v", err)
	}
	out := make(map[string]storage.BlobInfo, len(infos))
	for i, in := range infos {
		if i > 0 && infos[i-1].Digest >= in.Digest {
			t.Errorf("ListBlobs is not sorted by digest, or lists %s twice", in.Digest)
		}
		out[in.Digest] = in
	}
	return out
}

func testBlobsMissing(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	d := storage.BlobDigest([]byte("never put"))
	wantBlob(t, b, ctx, d, nil, "a blob never put")
	if err := a.DeleteBlob(ctx, d); err != nil {
		t.Errorf("DeleteBlob of a missing blob: %v, want nil", err)
	}
	if l := listed(t, b, ctx); len(l) != 0 {
		t.Errorf("ListBlobs of an empty store lists %d blobs", len(l))
	}
}

func testBlobsRoundTrip(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 1<<20/18+1)
	for name, v := range map[string][]byte{
		"empty":      {},
		"every byte": all,
		"text":       []byte("a PNG is only bytes"),
		"1 MiB":      big,
	} {
		d := putOK(t, a, ctx, v)
		wantBlob(t, b, ctx, d, v, name)
		info, ok := listed(t, b, ctx)[d]
		switch {
		case !ok:
			t.Errorf("%s: ListBlobs does not list %s", name, d)
		case info.Size != int64(len(v)):
			t.Errorf("%s: ListBlobs says %d bytes, want %d", name, info.Size, len(v))
		case info.Stored.IsZero():
			t.Errorf("%s: ListBlobs has no Stored time", name)
		}
	}
}

func testBlobsDedup(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	data := []byte("the same image, sent twice")
	d1 := putOK(t, a, ctx, data)
	d2 := putOK(t, b, ctx, bytes.Clone(data))
	if d1 != d2 {
		t.Errorf("the same bytes put twice: digests %s and %s", d1, d2)
	}
	if l := listed(t, a, ctx); len(l) != 1 {
		t.Errorf("the same bytes put twice: ListBlobs lists %d blobs, want 1", len(l))
	}
	wantBlob(t, a, ctx, d1, data, "bytes put twice")
}

func testBlobsRefresh(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	data := []byte("put again while an event refers to it")
	d := putOK(t, a, ctx, data)
	first := listed(t, a, ctx)[d].Stored
	// Let the clock pass the first Stored (at any store's resolution), so
	// that a re-put that keeps the old time is told from one that moves it.
	for !time.Now().After(first.Add(2 * time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	before := time.Now().Truncate(time.Millisecond)
	putOK(t, b, ctx, data)
	again := listed(t, a, ctx)[d].Stored
	if again.Before(before) {
		t.Errorf("a blob put again keeps Stored %v from its first put (%v), want it moved to the time of the second put (after %v)", again, first, before)
	}
}

func testBlobsDelete(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	keep := putOK(t, a, ctx, []byte("kept"))
	gone := putOK(t, a, ctx, []byte("deleted"))
	if err := b.DeleteBlob(ctx, gone); err != nil {
		t.Fatalf("DeleteBlob: %v", err)
	}
	wantBlob(t, a, ctx, gone, nil, "a deleted blob")
	wantBlob(t, a, ctx, keep, []byte("kept"), "a blob beside a deleted one")
	l := listed(t, a, ctx)
	if _, ok := l[gone]; ok {
		t.Error("ListBlobs lists a deleted blob")
	}
	if _, ok := l[keep]; !ok || len(l) != 1 {
		t.Errorf("ListBlobs after a delete lists %d blobs, want only the one kept", len(l))
	}
	if err := a.DeleteBlob(ctx, gone); err != nil {
		t.Errorf("DeleteBlob again: %v, want nil", err)
	}
	// Put back after a delete, it is there again.
	putOK(t, b, ctx, []byte("deleted"))
	wantBlob(t, a, ctx, gone, []byte("deleted"), "a blob put again after its delete")
}

func testBlobsList(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	want := map[string]int64{}
	for i := range 30 {
		v := bytes.Repeat([]byte{byte(i)}, i*7)
		want[putOK(t, a, ctx, v)] = int64(len(v))
	}
	l := listed(t, b, ctx)
	if len(l) != len(want) {
		t.Errorf("ListBlobs lists %d blobs, want %d", len(l), len(want))
	}
	for d, size := range want {
		if got, ok := l[d]; !ok {
			t.Errorf("ListBlobs does not list %s", d)
		} else if got.Size != size {
			t.Errorf("ListBlobs: %s has %d bytes, want %d", d, got.Size, size)
		}
	}
}

func testBlobsInvalid(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	valid := storage.BlobDigest([]byte("x"))
	for _, bad := range []string{"", "sha256:", valid[7:], strings.ToUpper(valid), "sha512:" + valid[7:],
		valid + "0", "sha256:../../" + strings.Repeat("a", 58), "sha256:" + strings.Repeat("a", 63) + "/"} {
		if _, _, err := b.GetBlob(ctx, bad); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("GetBlob(%q) = %v, want ErrInvalidKey", bad, err)
		}
		if err := a.DeleteBlob(ctx, bad); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("DeleteBlob(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

func testBlobsNoAliasing(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	data := []byte("caller's bytes")
	d := putOK(t, a, ctx, data)
	data[0] = 'X'
	wantBlob(t, b, ctx, d, []byte("caller's bytes"), "after the caller changed the bytes it put")
	got, _, err := b.GetBlob(ctx, d)
	if err != nil || len(got) == 0 {
		t.Fatalf("GetBlob: %d bytes, %v", len(got), err)
	}
	got[0] = 'Y'
	wantBlob(t, a, ctx, d, []byte("caller's bytes"), "after the caller changed the bytes it got")
}

func testBlobsConcurrent(t *testing.T, a, b storage.Blobs) {
	ctx := t.Context()
	same := bytes.Repeat([]byte("same"), 64<<10)
	var wg sync.WaitGroup
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if _, err := s.PutBlob(ctx, same); err != nil {
				t.Error(err)
			}
			data := bytes.Repeat([]byte{byte(i)}, 1000+i)
			if _, err := s.PutBlob(ctx, data); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	wantBlob(t, a, ctx, storage.BlobDigest(same), same, "the same bytes put by 16 goroutines at once")
	if l := listed(t, b, ctx); len(l) != 17 {
		t.Errorf("16 goroutines put one shared blob and one each: ListBlobs lists %d, want 17", len(l))
	}
}

func testBlobsDoneContext(t *testing.T, a, b storage.Blobs) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	kept := putOK(t, a, t.Context(), []byte("kept"))
	if _, err := a.PutBlob(ctx, []byte("never")); !errors.Is(err, context.Canceled) {
		t.Errorf("PutBlob with a done ctx = %v, want context.Canceled", err)
	}
	wantBlob(t, b, t.Context(), storage.BlobDigest([]byte("never")), nil, "a blob put with a done ctx")
	if _, _, err := a.GetBlob(ctx, kept); !errors.Is(err, context.Canceled) {
		t.Errorf("GetBlob with a done ctx = %v, want context.Canceled", err)
	}
	if err := a.DeleteBlob(ctx, kept); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteBlob with a done ctx = %v, want context.Canceled", err)
	}
	wantBlob(t, b, t.Context(), kept, []byte("kept"), "a blob deleted with a done ctx")
	if _, err := a.ListBlobs(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("ListBlobs with a done ctx = %v, want context.Canceled", err)
	}
}

// testBlobsPrefix checks that two prefixed views of the store keep their
// blobs apart from each other's and from the store's own.
func testBlobsPrefix(t *testing.T, a, b storage.Storage) {
	if _, ok := a.(storage.Lister); !ok {
		t.Skip("the store cannot be prefixed (no storage.Lister)")
	}
	if _, ok := a.(storage.KV); !ok {
		t.Skip("the store cannot be prefixed (no storage.KV)")
	}
	ctx := t.Context()
	view := func(s storage.Storage, prefix string) storage.Blobs {
		t.Helper()
		p, err := storage.Prefix(s, prefix)
		if err != nil {
			t.Fatal(err)
		}
		pb, ok := p.(storage.Blobs)
		if !ok {
			t.Fatalf("the store implements storage.Blobs, but its Prefix view does not (it needs storage.BlobScoper)")
		}
		return pb
	}
	va, vb, va2 := view(a, "blob-a:"), view(a, "blob-b:"), view(b, "blob-a:")
	own := a.(storage.Blobs)
	data := []byte("one image, two tenants")
	d := putOK(t, va, ctx, data)
	putOK(t, vb, ctx, data)
	wantBlob(t, own, ctx, d, nil, "the store's own blobs, after two views put one")
	wantBlob(t, va2, ctx, d, data, "a view's blob, through another handle's view of the same prefix")
	onlyA := putOK(t, va, ctx, []byte("a's alone"))
	wantBlob(t, vb, ctx, onlyA, nil, "one view's blob, through another prefix")
	if err := va.DeleteBlob(ctx, d); err != nil {
		t.Fatal(err)
	}
	wantBlob(t, vb, ctx, d, data, "a blob both views put, after one deleted it")
	wantBlob(t, va, ctx, d, nil, "a blob deleted through its view")
	if la := listed(t, va, ctx); len(la) != 1 || la[onlyA].Digest == "" {
		t.Errorf("the first view lists %d blobs, want its own one", len(la))
	}
	if lb := listed(t, vb, ctx); len(lb) != 1 || lb[d].Digest == "" {
		t.Errorf("the second view lists %d blobs, want its own one", len(lb))
	}
	if l := listed(t, own, ctx); len(l) != 0 {
		t.Errorf("the store lists %d blobs of its views as its own", len(l))
	}
	// A view of a view scopes within its scope.
	nested := view(view(a, "blob-a:").(storage.Storage), "inner:")
	wantBlob(t, nested, ctx, onlyA, nil, "the outer view's blob, through a view of it")
}

// blobsClosed checks that a closed store refuses blob operations.
func blobsClosed(t *testing.T, s storage.Storage, ctx context.Context) {
	t.Helper()
	b, ok := s.(storage.Blobs)
	if !ok {
		return
	}
	d := storage.BlobDigest([]byte("closing"))
	if _, err := b.PutBlob(ctx, []byte("closing")); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("PutBlob after Close = %v, want storage.ErrClosed", err)
	}
	if _, _, err := b.GetBlob(ctx, d); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("GetBlob after Close: error %v, want storage.ErrClosed", err)
	}
	if err := b.DeleteBlob(ctx, d); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("DeleteBlob after Close = %v, want storage.ErrClosed", err)
	}
	if _, err := b.ListBlobs(ctx); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("ListBlobs after Close: error %v, want storage.ErrClosed", err)
	}
}
