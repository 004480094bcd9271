package plugintest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Hostile modules no toolchain emits, written byte by byte, for testing
// that a host survives what a tenant may upload: attacks on loading rather
// than on calls.

var wasmHeader = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// StartLoop returns a module whose start function loops forever:
// instantiating it never finishes on its own.
func StartLoop() []byte {
	// no locals; loop; br 0; end
	return oneFunction([]byte{0, 0x03, 0x40, 0x0c, 0, 0x0b}, "", true)
}

// NestedBlocks returns a compile bomb: a valid module of one function of n
// nested empty blocks, exported as "run". wazero's compile time grows with
// the square of n (100,000, 300 KB: over a minute here) and its memory
// with n (1,000,000, 3 MB: most of a gigabyte).
func NestedBlocks(n int) []byte {
	code := []byte{0}
	for range n {
		code = append(code, 0x02, 0x40)
	}
	for range n {
		code = append(code, 0x0b)
	}
	return oneFunction(code, "run", false)
}

// WithStart returns wasm with a start section naming its exported function
// export (of type () -> ()), so that instantiating the module runs it.
func WithStart(wasm []byte, export string) ([]byte, error) {
	if !bytes.HasPrefix(wasm, wasmHeader) {
		return nil, errors.New("plugintest: not a Wasm module")
	}
	out := append([]byte(nil), wasmHeader...)
	found := false
	for rest := wasm[len(wasmHeader):]; len(rest) > 0; {
		id := rest[0]
		size, n, err := readULEB(rest[1:])
		if err != nil {
			return nil, err
		}
		end := 1 + n + int(size)
		if end > len(rest) {
			return nil, errors.New("plugintest: a section runs past the end of the module")
		}
		sec, body := rest[:end], rest[1+n:end]
		rest = rest[end:]
		if id == 8 {
			continue // an existing start section is replaced
		}
		out = append(out, sec...)
		if id != 7 {
			continue
		}
		idx, ok, err := exportedFunction(body, export)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, section(8, uleb(idx))...)
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("plugintest: the module exports no function %q", export)
	}
	return out, nil
}

// exportedFunction finds the index of the function exported as name in an
// export section's body.
func exportedFunction(body []byte, name string) (uint64, bool, error) {
	count, k, err := readULEB(body)
	if err != nil {
		return 0, false, err
	}
	p := body[k:]
	for range count {
		l, k, err := readULEB(p)
		if err != nil || k+int(l)+1 > len(p) {
			return 0, false, errors.New("plugintest: a malformed export section")
		}
		field, kind := string(p[k:k+int(l)]), p[k+int(l)]
		idx, m, err := readULEB(p[k+int(l)+1:])
		if err != nil {
			return 0, false, err
		}
		p = p[k+int(l)+1+m:]
		if kind == 0 && field == name {
			return idx, true, nil
		}
	}
	return 0, false, nil
}

// PatchU64 returns wasm with the little-endian 8-byte value old, which must
// occur exactly once in it, replaced by v: a way to set a constant of a
// built module (a data segment's value) without building it again.
func PatchU64(wasm []byte, old, v uint64) ([]byte, error) {
	var o, n [8]byte
	binary.LittleEndian.PutUint64(o[:], old)
	binary.LittleEndian.PutUint64(n[:], v)
	if c := bytes.Count(wasm, o[:]); c != 1 {
		return nil, fmt.Errorf("plugintest: %#x occurs %d times in the module, want once", old, c)
	}
	return bytes.Replace(wasm, o[:], n[:], 1), nil
}

// oneFunction is a module of one function of type () -> () with body code
// (locals declaration included, without the final end), exported as
// export when it is not "", and made the start function when start is set.
func oneFunction(code []byte, export string, start bool) []byte {
	m := append([]byte(nil), wasmHeader...)
	m = append(m, section(1, []byte{1, 0x60, 0, 0})...) // type 0: () -> ()
	m = append(m, section(3, []byte{1, 0})...)          // func 0: type 0
	if export != "" {
		e := append([]byte{1}, uleb(uint64(len(export)))...)
		e = append(append(e, export...), 0x00, 0) // func 0
		m = append(m, section(7, e)...)
	}
	if start {
		m = append(m, section(8, []byte{0})...)
	}
	body := append(append([]byte(nil), code...), 0x0b)
	m = append(m, section(10, append([]byte{1}, append(uleb(uint64(len(body))), body...)...))...)
	return m
}

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func uleb(n uint64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func readULEB(b []byte) (uint64, int, error) {
	var n uint64
	for i := 0; i < len(b) && i < 10; i++ {
		n |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return n, i + 1, nil
		}
	}
	return 0, 0, errors.New("plugintest: a malformed LEB128 number")
}
