package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
)

// recordingKV notes every key and value written through it.
type recordingKV struct {
	storage.KV
	mu      sync.Mutex
	written []string
}

func (r *recordingKV) Set(ctx context.Context, namespace, key string, value []byte) error {
	r.mu.Lock()
	r.written = append(r.written, namespace+"\x00"+key+"\x00"+string(value))
	r.mu.Unlock()
	return r.KV.Set(ctx, namespace, key, value)
}

// TestKeysKeptHashed: a key made with CreateKey is written to the storage
// by its hash alone: the key itself is returned once, and appears in no
// key or value written (TestKeysExpire authenticates with such a key).
func TestKeysKeptHashed(t *testing.T) {
	ctx := context.Background()
	kv := &recordingKV{KV: memory.New()}
	key, rec, err := server.CreateKey(ctx, kv, "acme", server.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kv.written) == 0 {
		t.Fatal("nothing was written")
	}
	hash := strings.TrimPrefix(server.HashKey(key), "sha256:")
	hashed := false
	for _, w := range kv.written {
		if strings.Contains(w, key) || strings.Contains(w, key[len(key)/2:]) {
			t.Errorf("the key itself (or half of it) was written: %q", w)
		}
		hashed = hashed || strings.Contains(w, hash)
	}
	if !hashed {
		t.Errorf("no write names the key's hash %s: %q (record %+v)", hash, kv.written, rec)
	}
}
