// Package fuel meters a WebAssembly module's work deterministically: it
// rewrites the module's binary so that the module charges a counter as it
// runs, and traps when the counter runs out.
//
// [Instrument] adds one mutable i64 global to the module, exported as
// [Export], and a charge at the entry of every function and at the header
// of every loop: the number of instructions of that function or loop body
// outside its inner loops (at least 1). A charge subtracts from the
// global, and when the global falls below zero the module traps
// (unreachable) with the global negative: the host reads the global after
// a trap to tell running out of fuel from any other trap. The host sets the
// global before a call and reads it after, so the fuel a call used is what
// it set minus what is left.
//
// Every way a module can run long passes a charge: a loop's iteration
// passes its header, a call (direct, indirect, recursive) passes the
// callee's entry, and code between two charges is straight-line or
// forward-branching code of one function body, which runs at most once per
// charge. The charge is the body's instruction count whichever branch is
// taken, so fuel bounds the instructions executed from above, and the
// same call with the same input uses the same fuel.
//
// The rewrite touches the global, export and code sections (and creates
// the first two when missing); every index of the module keeps its
// meaning. DWARF custom sections (.debug_*), whose code offsets the
// rewrite would make wrong, are dropped. A module using an instruction the
// decoder does not know (the proposals wazero does not run: exception
// handling, GC, typed function references) is refused with an error.
package fuel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Export is the name the fuel global is exported under.
const Export = "agentic-host:fuel"

// Options tunes the instrumentation.
type Options struct {
	// Initial is the global's value when the module is instantiated: the
	// fuel of its start function and of anything that runs before the
	// host sets the global. Default: 0, which means math.MaxInt64.
	Initial int64
}

// Instrument returns the metered form of the module wasm, or why it cannot
// be metered. The input is not modified.
func Instrument(wasm []byte, opts Options) ([]byte, error) {
	initial := opts.Initial
	if initial <= 0 {
		initial = math.MaxInt64
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("fuel: not a WebAssembly module (no \\0asm magic)")
	}
	if binary.LittleEndian.Uint32(wasm[4:8]) != 1 {
		return nil, fmt.Errorf("fuel: WebAssembly binary version %d, want 1", binary.LittleEndian.Uint32(wasm[4:8]))
	}
	var secs []section
	for r := (reader{b: wasm, i: 8}); r.i < len(wasm); {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", id, err)
		}
		if uint64(r.i)+uint64(n) > uint64(len(wasm)) {
			return nil, fmt.Errorf("fuel: section %d: %d bytes past the end of the module", id, uint64(r.i)+uint64(n)-uint64(len(wasm)))
		}
		secs = append(secs, section{id: id, body: wasm[r.i : r.i+int(n)]})
		r.i += int(n)
	}

	// The new global's index: after the imported globals and the module's
	// own.
	var importedGlobals, ownGlobals uint32
	hasExports := false
	for _, s := range secs {
		var err error
		switch s.id {
		case secImport:
			importedGlobals, err = countImportedGlobals(s.body)
		case secGlobal:
			ownGlobals, err = (&reader{b: s.body}).u32()
		case secExport:
			hasExports = true
			err = checkExportFree(s.body)
		}
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
	}
	global := importedGlobals + ownGlobals
	if global < importedGlobals {
		return nil, errors.New("fuel: too many globals")
	}

	newGlobal := []byte{valI64, 0x01, opI64Const}
	newGlobal = appendS64(newGlobal, initial)
	newGlobal = append(newGlobal, opEnd)
	newExport := appendName(nil, Export)
	newExport = append(newExport, exportGlobal)
	newExport = appendU32(newExport, global)

	var out []section
	addedGlobal, addedExport := false, false
	add := func(s section) {
		// Sections this rewrite creates go where the binary format's order
		// puts them.
		if !addedGlobal && s.id != secCustom && order(s.id) > order(secGlobal) {
			out = append(out, section{id: secGlobal, body: appendVec(nil, 0, newGlobal)})
			addedGlobal = true
		}
		if !addedExport && s.id != secCustom && order(s.id) > order(secExport) {
			out = append(out, section{id: secExport, body: appendVec(nil, 0, newExport)})
			addedExport = true
		}
		out = append(out, s)
	}
	for _, s := range secs {
		switch s.id {
		case secCustom:
			name, _, err := customName(s.body)
			if err != nil {
				return nil, fmt.Errorf("fuel: a custom section: %w", err)
			}
			if strings.HasPrefix(name, ".debug_") || name == "sourceMappingURL" {
				continue
			}
			add(s)
		case secGlobal:
			body, err := appendToVec(s.body, newGlobal)
			if err != nil {
				return nil, fmt.Errorf("fuel: the global section: %w", err)
			}
			addedGlobal = true
			add(section{id: secGlobal, body: body})
		case secExport:
			body, err := appendToVec(s.body, newExport)
			if err != nil {
				return nil, fmt.Errorf("fuel: the export section: %w", err)
			}
			if !addedGlobal {
				out = append(out, section{id: secGlobal, body: appendVec(nil, 0, newGlobal)})
				addedGlobal = true
			}
			addedExport = true
			out = append(out, section{id: secExport, body: body})
		case secCode:
			body, err := meterCode(s.body, global)
			if err != nil {
				return nil, fmt.Errorf("fuel: the code section: %w", err)
			}
			add(section{id: secCode, body: body})
		default:
			add(s)
		}
	}
	if !addedGlobal {
		out = append(out, section{id: secGlobal, body: appendVec(nil, 0, newGlobal)})
	}
	if !hasExports && !addedExport {
		out = append(out, section{id: secExport, body: appendVec(nil, 0, newExport)})
	}

	res := append(make([]byte, 0, len(wasm)+len(wasm)/8+64), wasm[:8]...)
	for _, s := range out {
		res = append(res, s.id)
		res = appendU32(res, uint32(len(s.body)))
		res = append(res, s.body...)
	}
	return res, nil
}

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// order is a section's place in the binary format's order.
func order(id byte) int {
	switch id {
	case secTag:
		return 5*2 + 1 // after memory, before global
	case secDataCount:
		return secElement*2 + 1 // after element, before code
	}
	return int(id) * 2
}

const (
	valI64       = 0x7E
	exportGlobal = 0x03
)

type section struct {
	id   byte
	body []byte
}

// countImportedGlobals counts the global imports of an import section.
func countImportedGlobals(b []byte) (uint32, error) {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	var globals uint32
	for range n {
		for range 2 { // module and name
			if err := r.name(); err != nil {
				return 0, err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return 0, err
		}
		switch kind {
		case 0x00: // a function: its type index
			_, err = r.u32()
		case 0x01: // a table: its element type, then its limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 0x02: // a memory: its limits
			err = r.limits()
		case 0x03: // a global: its type and mutability
			globals++
			_, err = r.byte()
			if err == nil {
				_, err = r.byte()
			}
		case 0x04: // a tag: an attribute and a type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, fmt.Errorf("an import of kind %#x", kind)
		}
		if err != nil {
			return 0, err
		}
	}
	return globals, nil
}

// checkExportFree fails if the module already exports the name Export.
func checkExportFree(b []byte) error {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		start := r.i
		if err := r.name(); err != nil {
			return err
		}
		if bytes.Equal(r.b[start:r.i], appendName(nil, Export)) {
			return fmt.Errorf("the module exports %q already", Export)
		}
		if _, err := r.byte(); err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// customName returns a custom section's name.
func customName(b []byte) (string, int, error) {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return "", 0, err
	}
	if uint64(r.i)+uint64(n) > uint64(len(b)) {
		return "", 0, errors.New("a name past the end of its section")
	}
	return string(b[r.i : r.i+int(n)]), r.i + int(n), nil
}

// appendToVec returns the vector vec (a count, then its items) with item
// added at its end.
func appendToVec(vec, item []byte) ([]byte, error) {
	r := reader{b: vec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if n == math.MaxUint32 {
		return nil, errors.New("a vector that is full")
	}
	out := appendU32(make([]byte, 0, len(vec)+len(item)+5), n+1)
	out = append(out, vec[r.i:]...)
	return append(out, item...), nil
}

// appendVec appends a vector of n+1 items: items (n of them, encoded), then
// item.
func appendVec(b []byte, n uint32, item []byte) []byte {
	b = appendU32(b, n+1)
	return append(b, item...)
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// reader decodes the binary format.
type reader struct {
	b []byte
	i int
}

var errShort = errors.New("unexpected end")

func (r *reader) byte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, errors.New("an integer past 32 bits")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

// skipLEB skips a LEB128 of at most max bytes.
func (r *reader) skipLEB(max int) error {
	for n := 1; ; n++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
		if n == max {
			return errors.New("an integer too long")
		}
	}
}

func (r *reader) skip(n int) error {
	if n < 0 || r.i+n > len(r.b) {
		return errShort
	}
	r.i += n
	return nil
}

func (r *reader) name() error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	return r.skip(int(n))
}

// limits skips a table's or a memory's limits.
func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 0x07 {
		return fmt.Errorf("limits flags %#x", flags)
	}
	if err := r.skipLEB(10); err != nil {
		return err
	}
	if flags&0x01 != 0 {
		return r.skipLEB(10)
	}
	return nil
}
