package plugins_test

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Modules no toolchain emits, written byte by byte: the hostile suite's
// attacks on loading (a start function, a module that is expensive to
// compile) rather than on calls.

// readULEB decodes an unsigned LEB128 at the start of b and returns it
// with its length in bytes.
func readULEB(t testing.TB, b []byte) (uint64, int) {
	t.Helper()
	var n uint64
	for i := 0; i < len(b) && i < 10; i++ {
		n |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return n, i + 1
		}
	}
	t.Fatalf("bad LEB128 at % x", b[:min(len(b), 10)])
	return 0, 0
}

// wasmSection encodes one section.
func wasmSection(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

var wasmHeader = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// oneFunction is a module of one function of type () -> () with body code
// (locals declaration included, without the final end), exported as
// export when it is not "", and made the start function when start is set.
func oneFunction(code []byte, export string, start bool) []byte {
	m := append([]byte(nil), wasmHeader...)
	m = append(m, wasmSection(1, []byte{1, 0x60, 0, 0})...) // type 0: () -> ()
	m = append(m, wasmSection(3, []byte{1, 0})...)          // func 0: type 0
	if export != "" {
		e := append([]byte{1}, uleb(uint64(len(export)))...)
		e = append(append(e, export...), 0x00, 0) // func 0
		m = append(m, wasmSection(7, e)...)
	}
	if start {
		m = append(m, wasmSection(8, []byte{0})...)
	}
	body := append(append([]byte(nil), code...), 0x0b)
	m = append(m, wasmSection(10, append([]byte{1}, append(uleb(uint64(len(body))), body...)...))...)
	return m
}

// startLoop is a module whose start function loops forever: instantiating
// it never finishes on its own.
func startLoop() []byte {
	// no locals; loop; br 0; end
	return oneFunction([]byte{0, 0x03, 0x40, 0x0c, 0, 0x0b}, "", true)
}

// nestedBlocks is a compile bomb: one function of n nested empty blocks.
// It is small and valid, and wazero's compile time grows with the square
// of n.
func nestedBlocks(n int) []byte {
	code := []byte{0}
	for range n {
		code = append(code, 0x02, 0x40)
	}
	for range n {
		code = append(code, 0x0b)
	}
	return oneFunction(code, "run", false)
}

// withStart returns wasm with a start section naming its exported function
// export (of type () -> ()), inserted after the export section.
func withStart(t testing.TB, wasm []byte, export string) []byte {
	t.Helper()
	if !bytes.HasPrefix(wasm, wasmHeader) {
		t.Fatal("not a Wasm module")
	}
	out := append([]byte(nil), wasmHeader...)
	found := false
	for rest := wasm[len(wasmHeader):]; len(rest) > 0; {
		id := rest[0]
		size, n := readULEB(t, rest[1:])
		end := 1 + n + int(size)
		sec, body := rest[:end], rest[1+n:end]
		rest = rest[end:]
		if id == 8 {
			continue // an existing start section is replaced
		}
		out = append(out, sec...)
		if id != 7 {
			continue
		}
		count, k := readULEB(t, body)
		p := body[k:]
		for range count {
			l, k := readULEB(t, p)
			name := string(p[k : k+int(l)])
			kind := p[k+int(l)]
			idx, m := readULEB(t, p[k+int(l)+1:])
			p = p[k+int(l)+1+m:]
			if kind == 0 && name == export {
				out = append(out, wasmSection(8, uleb(idx))...)
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("the module exports no function %q", export)
	}
	return out
}

// patchU64 replaces the little-endian 8-byte value old, which must occur
// exactly once in wasm, with v.
func patchU64(t testing.TB, wasm []byte, old, v uint64) []byte {
	t.Helper()
	var o, n [8]byte
	binary.LittleEndian.PutUint64(o[:], old)
	binary.LittleEndian.PutUint64(n[:], v)
	if c := bytes.Count(wasm, o[:]); c != 1 {
		t.Fatalf("%#x occurs %d times in the module, want once", old, c)
	}
	return bytes.Replace(wasm, o[:], n[:], 1)
}
