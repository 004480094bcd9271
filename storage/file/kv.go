package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/storage"
)

// kvDir is the subdirectory of the key-value store; it is not a session
// file (its name has no .jsonl extension).
const kvDir = "kv"

// kvMagic starts every value file; the format's version is its last byte.
var kvMagic = []byte("AGKV\x01")

// ErrCorruptValue is matched (errors.Is) by the error of a Get whose value
// file does not decode: a crash without [Options.Fsync] on a file system
// that does not order a rename after the data it names, or damage.
var ErrCorruptValue = errors.New("file: corrupt value file")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// kvPath returns the file of key in namespace: both hashed (SHA-256), so
// that any bytes up to the bounds of storage.KV make a short, safe name.
func (st *Store) kvPath(namespace, key string) (dir, path string) {
	ns := sha256.Sum256([]byte(namespace))
	k := sha256.Sum256([]byte(key))
	dir = filepath.Join(st.dir, kvDir, hex.EncodeToString(ns[:]))
	return dir, filepath.Join(dir, hex.EncodeToString(k[:]))
}

// kvReady checks ctx and the store before a KV operation, and passes on
// the caller's check of its bounds.
func (st *Store) kvReady(ctx context.Context, bounds error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if st.isClosed() {
		return storage.ErrClosed
	}
	if bounds != nil {
		return fmt.Errorf("file: %w", bounds)
	}
	return nil
}

// Get implements [storage.KV]. A value file that does not decode, or that
// names another namespace or key, fails with [ErrCorruptValue].
func (st *Store) Get(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := st.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return nil, false, err
	}
	_, path := st.kvPath(namespace, key)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("file: get: %w", err)
	}
	value, err := decodeValue(data, namespace, key)
	if err != nil {
		return nil, false, fmt.Errorf("file: get: %s: %w", path, err)
	}
	return value, true, nil
}

// Set implements [storage.KV]: it writes the value to a new file in the
// namespace's directory and renames it over the key's, so that a Get (even
// after a crash) finds the old value or the new one, whole. With
// [Options.Fsync], the file and then the directory are fsynced, so that the
// value survives a power loss.
func (st *Store) Set(ctx context.Context, namespace, key string, value []byte) error {
	if err := st.kvReady(ctx, storage.CheckKV(namespace, key, value)); err != nil {
		return err
	}
	dir, path := st.kvPath(namespace, key)
	var tmp *os.File
	for try := 0; ; try++ {
		if err := st.mkdirKV(dir); err != nil {
			return fmt.Errorf("file: set: %w", err)
		}
		var err error
		tmp, err = os.CreateTemp(dir, ".set-*")
		if errors.Is(err, fs.ErrNotExist) && try < 3 {
			continue // a Delete removed the namespace's empty directory meanwhile
		}
		if err != nil {
			return fmt.Errorf("file: set: %w", err)
		}
		break
	}
	_, err := tmp.Write(encodeValue(namespace, key, value))
	if err == nil && st.fsync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("file: set: %w", err)
	}
	if st.fsync {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("file: set: %w", err)
		}
	}
	return nil
}

// Delete implements [storage.KV].
func (st *Store) Delete(ctx context.Context, namespace, key string) error {
	if err := st.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return err
	}
	dir, path := st.kvPath(namespace, key)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("file: delete: %w", err)
	}
	if st.fsync {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("file: delete: %w", err)
		}
	}
	// A namespace left without keys leaves no directory (it fails, and
	// stays, while it holds any file; a Set that loses its directory to
	// this makes it again).
	if os.Remove(dir) == nil && st.fsync {
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("file: delete: %w", err)
		}
	}
	return nil
}

// Len implements [storage.KV]: it counts the namespace's value files.
func (st *Store) Len(ctx context.Context, namespace string) (int, error) {
	if err := st.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return 0, err
	}
	ns := sha256.Sum256([]byte(namespace))
	entries, err := os.ReadDir(filepath.Join(st.dir, kvDir, hex.EncodeToString(ns[:])))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("file: len: %w", err)
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n, nil
}

// Keys implements [storage.KV]: it reads the key out of each of the
// namespace's value files. A file that does not decode fails it with
// [ErrCorruptValue].
func (st *Store) Keys(ctx context.Context, namespace string) ([]string, error) {
	if err := st.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return nil, err
	}
	ns := sha256.Sum256([]byte(namespace))
	dir := filepath.Join(st.dir, kvDir, hex.EncodeToString(ns[:]))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file: keys: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("file: keys: %w", err)
		}
		gotNS, key, _, err := decodeEntry(data)
		if err != nil || gotNS != namespace {
			return nil, fmt.Errorf("file: keys: %s: %w", e.Name(), errors.Join(err, ErrCorruptValue))
		}
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys, nil
}

// tornAge is how old a Set's temporary file must be before Open takes it
// for the leftover of a Set that crashed. A Set writes and renames its file
// within milliseconds; a younger file may be another process's Set in
// progress (the CLI's processes share a directory: an approve beside the
// chat that parked), which removing would fail.
const tornAge = time.Minute

// removeTornValues removes the temporary files of Sets that a crash
// interrupted before their rename: those older than tornAge.
func removeTornValues(dir string, log *slog.Logger) {
	removeOld := func(f string) {
		fi, err := os.Stat(f)
		if err != nil || time.Since(fi.ModTime()) < tornAge {
			return // gone meanwhile, or a Set or PutBlob in progress
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("file: cannot remove the temporary file of an interrupted write", "path", f, "error", err)
		}
	}
	torn, _ := filepath.Glob(filepath.Join(dir, kvDir, "*", ".set-*"))
	replaced, _ := filepath.Glob(filepath.Join(dir, ".replace-*"))
	for _, f := range append(torn, replaced...) {
		removeOld(f)
	}
	removeTornBlobs(dir, removeOld)
}

// mkdirKV creates a namespace's directory (and kv/) when missing; with
// fsync, their entries are made durable.
func (st *Store) mkdirKV(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	root := filepath.Dir(dir)
	_, rootErr := os.Stat(root)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !st.fsync {
		return nil
	}
	if rootErr != nil {
		if err := syncDir(st.dir); err != nil {
			return err
		}
	}
	return syncDir(root)
}

// encodeValue returns a value file: the magic, the namespace and the key
// (each after its length as a uvarint), the value, and a CRC-32C of all
// that.
func encodeValue(namespace, key string, value []byte) []byte {
	b := make([]byte, 0, len(kvMagic)+2*binary.MaxVarintLen64+len(namespace)+len(key)+len(value)+4)
	b = append(b, kvMagic...)
	b = binary.AppendUvarint(b, uint64(len(namespace)))
	b = append(b, namespace...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, value...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// decodeValue checks a value file of namespace and key and returns its
// value.
func decodeValue(data []byte, namespace, key string) ([]byte, error) {
	gotNS, gotKey, value, err := decodeEntry(data)
	if err != nil {
		return nil, err
	}
	if gotNS != namespace || gotKey != key {
		return nil, fmt.Errorf("%w: it holds another namespace or key", ErrCorruptValue)
	}
	return value, nil
}

// decodeEntry checks a value file and returns its namespace, key and value.
func decodeEntry(data []byte) (namespace, key string, value []byte, err error) {
	if len(data) < len(kvMagic)+4 || !bytes.HasPrefix(data, kvMagic) {
		return "", "", nil, fmt.Errorf("%w: no header (%d bytes)", ErrCorruptValue, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return "", "", nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptValue)
	}
	rest := body[len(kvMagic):]
	var names [2]string
	for i := range names {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", "", nil, fmt.Errorf("%w: bad length", ErrCorruptValue)
		}
		names[i] = string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
	}
	return names[0], names[1], bytes.Clone(rest), nil
}

// AddWithin implements [storage.Counter]: the counter is read, added to
// and written back (as Set writes a value) under a lock of the store's, so
// that it is atomic within the process — the one a file store serves.
func (st *Store) AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (int64, bool, error) {
	if err := st.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return 0, false, err
	}
	st.counterMu.Lock()
	defer st.counterMu.Unlock()
	cur, ok, err := st.Get(ctx, namespace, key)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		cur = nil
	}
	value, added, err := storage.AddCounter(cur, delta, limit)
	if err != nil || !added {
		return value, false, err
	}
	if err := st.Set(ctx, namespace, key, strconv.AppendInt(nil, value, 10)); err != nil {
		return 0, false, err
	}
	return value, true, nil
}

var (
	_ storage.KV      = (*Store)(nil)
	_ storage.Counter = (*Store)(nil)
)
