package storage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentichost/agentic/storage"
)

// TestBlobDigest: a digest is sha256: and the hex of the bytes' SHA-256,
// and CheckBlobDigest accepts exactly what BlobDigest makes.
func TestBlobDigest(t *testing.T) {
	d := storage.BlobDigest([]byte("abc"))
	if want := "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; d != want {
		t.Fatalf("BlobDigest(abc) = %s, want %s", d, want)
	}
	if err := storage.CheckBlobDigest(d); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "sha256:", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		strings.ToUpper(d), "sha512:" + d[7:], d + "0", d[:70], "sha256:../../../../etc/passwd" + strings.Repeat("a", 35)} {
		if err := storage.CheckBlobDigest(bad); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("CheckBlobDigest(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}
