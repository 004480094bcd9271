package file_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// TestBlobFiles: a blob is a file under blobs/ named by its digest and
// holding its bytes (a tenant's under blobs/@TENANT:/); a damaged file
// fails GetBlob with ErrCorruptBlob, and putting the bytes again repairs
// it; an Open removes the temporary files of interrupted puts once they
// are a minute old, and leaves younger ones.
func TestBlobFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := file.Open(dir, file.Options{Fsync: true})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("an attachment")
	d, err := st.PutBlob(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	hexName := strings.TrimPrefix(d, "sha256:")
	if got, err := os.ReadFile(filepath.Join(dir, "blobs", hexName)); err != nil || string(got) != string(data) {
		t.Fatalf("blobs/%s: %q, %v", hexName, got, err)
	}
	view, err := storage.Prefix(st, "acme:")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := view.(storage.Blobs).PutBlob(ctx, data); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", "@acme:", hexName)); err != nil {
		t.Errorf("the tenant's blob: %v", err)
	}
	if ids, err := st.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSessions = %q, %v: blobs are not sessions", ids, err)
	}

	// Damage, then repair.
	if err := os.WriteFile(filepath.Join(dir, "blobs", hexName), []byte("an attachmenT"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.GetBlob(ctx, d); !errors.Is(err, file.ErrCorruptBlob) {
		t.Errorf("GetBlob of a damaged file: %v, want ErrCorruptBlob", err)
	}
	if _, err := st.PutBlob(ctx, data); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := st.GetBlob(ctx, d); err != nil || !ok || string(got) != string(data) {
		t.Errorf("GetBlob after putting the bytes again: %q %v %v", got, ok, err)
	}
	st.Close()

	// Leftovers of interrupted puts.
	old, young := filepath.Join(dir, "blobs", ".put-old"), filepath.Join(dir, "blobs", "@acme:", ".put-young")
	for _, f := range []string{old, young} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	st, err = file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old leftover is still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the young leftover (a put in progress) was removed: %v", err)
	}
	if infos, err := st.ListBlobs(ctx); err != nil || len(infos) != 1 || infos[0].Digest != d || infos[0].Size != int64(len(data)) {
		t.Errorf("ListBlobs = %+v, %v; want the one blob", infos, err)
	}
}
