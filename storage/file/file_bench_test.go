package file_test

import (
	"fmt"
	"testing"

	"github.com/agentichost/agentic/storage/storagetest"
)

// BenchmarkAppend appends one typical step event per operation, with Fsync
// off (a write(2)) and on (a write(2) and an fsync(2)).
func BenchmarkAppend(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			st, _ := openStore(b, b.TempDir(), fsync)
			storagetest.BenchmarkAppend(b, st)
		})
	}
}

// BenchmarkLoad10k loads a session of 10,000 events (steps, tool results
// and tool starts, appended one at a time and in batches of three).
func BenchmarkLoad10k(b *testing.B) {
	st, _ := openStore(b, b.TempDir(), false)
	storagetest.BenchmarkLoad(b, st, 10_000)
}

// BenchmarkKV gets and sets values (a file each), without and with fsync.
func BenchmarkKV(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			st, _ := openStore(b, b.TempDir(), fsync)
			storagetest.BenchmarkKV(b, st)
		})
	}
}
