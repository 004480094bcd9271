package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// TestSweepBlobs: a referenced blob is never deleted, however old (no
// grace); an unreferenced one is deleted once past the grace, spared
// within it; a dry run deletes nothing; each tenant's view is swept alone.
func TestSweepBlobs(t *testing.T) {
	ctx := context.Background()
	base := memory.New()
	tenant, err := storage.Prefix(base, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	blobs := tenant.(storage.Blobs)
	put := func(s string) string {
		d, err := blobs.PutBlob(ctx, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	kept, orphan := put("an image a message refers to"), put("an output nobody refers to")
	ev := ledger.Event{ID: "e1", Kind: ledger.KindInput, Time: time.Now().UTC(), Input: &ledger.Input{MessageID: "m1",
		Parts: []ledger.Part{{Type: ledger.PartImage, MIME: "image/png", Blob: kept, Size: 28}}}}
	if err := tenant.Append(ctx, "s1", ev); err != nil {
		t.Fatal(err)
	}
	// Another tenant's blob, unreferenced, is not the sweep's business.
	other, _ := storage.Prefix(base, "other:")
	otherDigest, _ := other.(storage.Blobs).PutBlob(ctx, []byte("another tenant's"))

	// Within the default grace (an hour), nothing unreferenced goes.
	got, err := host.SweepBlobs(ctx, tenant, host.BlobSweepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got != (host.BlobSweep{Sessions: 1, Referenced: 1, ReferencedBytes: 28, Recent: 1, RecentBytes: 26}) {
		t.Errorf("sweep within the grace = %+v", got)
	}
	// A dry run without grace counts the orphan, deletes nothing.
	got, err = host.SweepBlobs(ctx, tenant, host.BlobSweepOptions{Grace: -1, DryRun: true})
	if err != nil || got.Deleted != 1 || got.DeletedBytes != 26 || got.Referenced != 1 {
		t.Errorf("dry run = %+v, %v", got, err)
	}
	if _, ok, _ := blobs.GetBlob(ctx, orphan); !ok {
		t.Error("a dry run deleted the orphan")
	}
	// Without grace, the orphan goes; the referenced blob stays.
	got, err = host.SweepBlobs(ctx, tenant, host.BlobSweepOptions{Grace: -1})
	if err != nil || got.Deleted != 1 || got.Referenced != 1 || got.Recent != 0 {
		t.Errorf("sweep without grace = %+v, %v", got, err)
	}
	if _, ok, _ := blobs.GetBlob(ctx, orphan); ok {
		t.Error("the orphan is still there")
	}
	if _, ok, _ := blobs.GetBlob(ctx, kept); !ok {
		t.Fatal("the sweep deleted a blob an event refers to")
	}
	if _, ok, _ := other.(storage.Blobs).GetBlob(ctx, otherDigest); !ok {
		t.Error("the sweep of one tenant deleted another's blob")
	}
	if _, err := host.SweepBlobs(ctx, noBlobs{}, host.BlobSweepOptions{}); err == nil {
		t.Error("a store without blobs: no error")
	}
}

type noBlobs struct{ storage.Storage }
