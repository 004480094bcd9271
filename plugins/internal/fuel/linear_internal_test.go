package fuel

import (
	"testing"
)

// manyLoops is a function body (no locals) of k loops inside one block,
// each leaving it with a br_if 1 to the block's end: k regions that each
// branch to one join point, the shape that made the first pass quadratic.
func manyLoops(k int) []byte {
	code := []byte{0x00, opBlock, 0x40}
	for range k {
		code = append(code,
			opLoop, 0x40, // loop
			0x41, 0x00, opBrIf, 0x01, // i32.const 0; br_if 1 (the block's end)
			opEnd)
	}
	return append(code, opEnd, opEnd)
}

// TestFirstPassIsLinear: the first pass's graph of ways grows with the
// body, not with the square of the regions that meet at one point: a body
// of k loops that each branch to one block's end makes O(k) nodes and
// kids, where lists of ways merged at each branch held O(k^2).
func TestFirstPassIsLinear(t *testing.T) {
	var m scratch
	for _, k := range []int{1_000, 10_000, 100_000} {
		code := manyLoops(k)
		if _, err := meterBody(nil, &m, code, &funcCode{layout: &layout{}}); err != nil {
			t.Fatal(err)
		}
		if work := len(m.nodes) + len(m.kids); work > 4*len(code) {
			t.Errorf("%d loops (%d bytes): %d nodes and kids, want at most %d", k, len(code), work, 4*len(code))
		}
	}
}

// BenchmarkFirstPass meters a body of 100,000 loops that all branch to one
// point (0.7 MB): linear time.
func BenchmarkFirstPass(b *testing.B) {
	code := manyLoops(100_000)
	var m scratch
	var dst []byte
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		var err error
		if dst, err = meterBody(dst[:0], &m, code, &funcCode{layout: &layout{}}); err != nil {
			b.Fatal(err)
		}
	}
}
