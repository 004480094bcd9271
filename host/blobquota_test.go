package host_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/memory"
)

// holdingStore is a memory store whose blob puts wait until released,
// each telling it began.
type holdingStore struct {
	*memory.Store
	putting chan struct{}
	release chan struct{}
}

func (s *holdingStore) PutBlob(ctx context.Context, data []byte) (string, error) {
	s.putting <- struct{}{}
	<-s.release
	return s.Store.PutBlob(ctx, data)
}

// TestBlobQuotaHoldsForSendsAtOnce: messages sent at once, each with an
// attachment of its own, pass the blob quota no further than one at a
// time would: with room for three, three put their bytes and the others
// are refused with a *BlobQuotaError while the three still put theirs
// (each send's bytes are reserved before its put). Each used to check the
// quota against what the store listed before any of them put, and all
// nine were stored: three times the quota.
func TestBlobQuotaHoldsForSendsAtOnce(t *testing.T) {
	const n, size, quota = 9, 4000, 12_000
	store := &holdingStore{Store: memory.New(), putting: make(chan struct{}, n), release: make(chan struct{})}
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) {
		o.Storage, o.BlobThreshold, o.BlobQuota = store, 1000, quota
	})
	ctx := context.Background()
	refused := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			part := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: noise(uint64(100+i), size)}
			_, err := hs.host.Session("s"+string(rune('a'+i))).Send(ctx, "see", host.SendOptions{Parts: []ledger.Part{part}})
			if err != nil {
				refused <- err
			}
		})
	}
	// Every send either begins its put (and waits there) or is refused.
	putting, errs := 0, []error{}
	for putting+len(errs) < n {
		select {
		case <-store.putting:
			putting++
		case err := <-refused:
			errs = append(errs, err)
		}
	}
	close(store.release)
	wg.Wait()
	if putting != quota/size {
		t.Errorf("%d sends put their bytes, want %d (the quota's room)", putting, quota/size)
	}
	for _, err := range errs {
		if !errors.Is(err, host.ErrBlobQuota) {
			t.Errorf("a send refused with %v, want a *BlobQuotaError", err)
		}
	}
	infos, err := store.ListBlobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, in := range infos {
		used += in.Size
	}
	if used > quota {
		t.Errorf("%d bytes stored, past the quota of %d", used, quota)
	}
}

// TestBlobQuotaSameBytesAtOnce: two messages sent at once with the same
// new attachment reserve it once (the store keeps it once): with room
// for one copy, both pass. A reservation per send would refuse the
// second for bytes that are never stored twice.
func TestBlobQuotaSameBytesAtOnce(t *testing.T) {
	const size = 4000
	store := &holdingStore{Store: memory.New(), putting: make(chan struct{}, 2), release: make(chan struct{})}
	hs := newHarness(t, fakemodel.Options{}, host.Agent{}, func(o *host.Options) {
		o.Storage, o.BlobThreshold, o.BlobQuota = store, 1000, size+10
	})
	ctx := context.Background()
	data := noise(7, size)
	errs := make(chan error, 2)
	for _, id := range []string{"a", "b"} {
		go func() {
			part := ledger.Part{Type: ledger.PartImage, MIME: "image/png", Data: data}
			_, err := hs.host.Session(id).Send(ctx, "see", host.SendOptions{Parts: []ledger.Part{part}})
			errs <- err
		}()
	}
	// Both reach their puts while neither is stored.
	for range 2 {
		select {
		case <-store.putting:
		case err := <-errs:
			t.Fatalf("a send of bytes another is putting: %v, want it to pass", err)
		}
	}
	close(store.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
