package plugins

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLowestData: the lowest address a module's active data initialise,
// read from i32.const offsets (negative ones as the unsigned addresses
// they are), and no answer for an offset it cannot read; the engine the
// TypeScript kit builds with keeps its data above its 1 MiB stack.
func TestLowestData(t *testing.T) {
	module := func(data []byte) []byte {
		m := []byte("\x00asm\x01\x00\x00\x00")
		m = append(m, 5, 3, 1, 0, 1) // memory section: one memory, min 1
		m = append(m, 11)
		m = binary.AppendUvarint(m, uint64(len(data)))
		return append(m, data...)
	}
	active := func(op ...byte) []byte { return append(append([]byte{0}, op...), 0x0b, 2, 'h', 'i') }
	for _, tt := range []struct {
		name string
		data []byte
		want uint32
		ok   bool
	}{
		{"two segments", append([]byte{2}, append(active(0x41, 0x80, 0x08), active(0x41, 0x80, 0x80, 0x40)...)...), 1024, true},
		{"passive only", []byte{1, 1, 2, 'h', 'i'}, 0, false},
		{"a negative offset", append([]byte{1}, active(0x41, 0x7f)...), 0xffffffff, true},
		{"an offset from a global", append([]byte{1}, active(0x23, 0)...), 0, false},
		{"broken", []byte{3, 0}, 0, false},
	} {
		got, ok := lowestData(module(tt.data))
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	engine, err := os.ReadFile(filepath.Join("..", "pdk", "ts", "node_modules", "quickjs-wasi", "quickjs.wasm"))
	if err != nil {
		t.Skipf("the TypeScript kit's packages are not installed (scripts/plugin-toolchains.sh): %v", err)
	}
	if low, ok := lowestData(engine); !ok || low < 1<<20 {
		t.Errorf("the engine's data start at %d (%v), want above its 1 MiB stack", low, ok)
	}
}

// TestHealthCarry: a failure counted on a module replaced by the same
// version counts on the new one (through current), and the same module
// committed again (carry onto itself, or back onto one that took its
// health over) makes no loop.
func TestHealthCarry(t *testing.T) {
	var a, b health
	a.failures = []time.Time{time.Now()}
	b.carry(&a)
	if a.current() != &b || len(b.failures) != 1 {
		t.Fatalf("after carry: current %p (want %p), %d failures", a.current(), &b, len(b.failures))
	}
	b.carry(&b)
	a.carry(&b) // b's health was a's: no cycle
	if a.current() != &b || b.current() != &b {
		t.Fatal("a carry onto itself or back made current change")
	}
}
