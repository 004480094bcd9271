// Package fuel meters a WebAssembly module's work deterministically: it
// rewrites the module's binary so that the module charges a counter as it
// runs, and asks the host for more when the counter runs out.
//
// [Instrument] adds one mutable i64 global to the module, exported as
// [Export], one imported function, [ImportModule].[ImportName], and
// charges: at the entry of every function, the header of every loop, and
// the join points between (below). A charge subtracts its cost from the
// global; some charges, and a test after every call, then test it: when
// the global is below zero, the test calls the import, and the host gives
// more fuel (the global is set higher) or ends the call (the import
// panics, which traps the call). The host sets the global before a call
// and reads it after: the fuel a call used is what it was given minus
// what is left, which may be below zero when the call returns (the last
// charges since a test).
//
// The charges split each function body into regions, each entered only at
// its start, where its charge is, and charged all its instructions: so the
// fuel a call is charged bounds from above the instructions it runs, on
// every path. A region begins at the function's start, at every loop's
// header, and at every join point (the end of a block or an if, an else)
// that a branch from before the region could reach; at the other join
// points once the region holds 32 instructions, so that a charge stands
// for a stretch of code, not for a whole loop body (Go's functions are one
// loop around a br_table dispatch, entered again at every jump, which
// charging the whole body at the header would overcount many times).
//
// A test is what costs (compiled code cannot keep values in registers
// across the call it may make), so only some charges test: every loop's
// header, a function's entry when the function can call before it passes
// a loop's header, and a region whose charges since the last test could
// pass 1,000 instructions; and a test follows every call, so that a guest
// comes back from a call with its fuel tested, however deep its stack.
//
// So the guest returns to the host at least once per global's worth of
// instructions and a few thousand more, whatever it runs (loops, call
// trees, recursion, long straight-line code), and the same call on the
// same state uses the same fuel: which charges test changes when the host
// hears of it, never what a call is charged.
//
// The refill import goes after the module's imported functions, so every
// defined function's index moves up by one: the rewrite moves them in the
// code (call, return_call, ref.func), the exports, the start function, the
// element segments, the globals' initial values and the name section.
// DWARF custom sections (.debug_*), whose code offsets the rewrite would
// make wrong, are dropped. A module using an instruction or a form the
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

// The function every metered module imports, () -> (), called when a
// charge takes the global below zero: the host then refills the global
// (and goes on) or ends the call (a trap, through a panic of the host
// function). Its calls are where a long guest returns to Go: the host
// checks the call's context there.
const (
	ImportModule = "agentic:host/fuel"
	ImportName   = "refill"
)

// Options tunes the instrumentation.
type Options struct {
	// Initial is the global's value when the module is instantiated: the
	// fuel of its start function and of anything that runs before the
	// host sets the global, before the first refill. Default: 0, which
	// means math.MaxInt64.
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

	// What the rewrite needs to know first: the imported functions and
	// globals (the refill import goes after the imported functions, so
	// every defined function's index moves up by one), the globals (the
	// fuel global goes after them all), and a type () -> ().
	m := layout{voidType: -1}
	for _, s := range secs {
		var err error
		switch s.id {
		case secType:
			err = m.readTypes(s.body)
		case secImport:
			err = m.readImports(s.body)
		case secGlobal:
			m.ownGlobals, err = (&reader{b: s.body}).u32()
		case secExport:
			err = checkExportFree(s.body)
		}
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
	}
	global := m.importedGlobals + m.ownGlobals
	if global < m.importedGlobals || m.types == math.MaxUint32 || m.importedFuncs == math.MaxUint32 {
		return nil, errors.New("fuel: too many globals, types or imports")
	}
	sh := shift{from: m.importedFuncs}

	newType := []byte{0x60, 0x00, 0x00}
	typeIdx, addType := m.voidType, m.voidType < 0
	if addType {
		typeIdx = int64(m.types)
	}
	newImport := appendName(appendName(nil, ImportModule), ImportName)
	newImport = append(newImport, 0x00)
	newImport = appendU32(newImport, uint32(typeIdx))
	newGlobal := []byte{valI64, 0x01, opI64Const}
	newGlobal = appendS64(newGlobal, initial)
	newGlobal = append(newGlobal, opEnd)
	newExport := appendName(nil, Export)
	newExport = append(newExport, exportGlobal)
	newExport = appendU32(newExport, global)

	// The sections to add, where the binary format's order puts them
	// when the module has none of their kind.
	missing := map[byte][]byte{
		secImport: vecOf(newImport),
		secGlobal: vecOf(newGlobal),
		secExport: vecOf(newExport),
	}
	if addType {
		missing[secType] = vecOf(newType)
	}
	var out []section
	place := func(before byte) {
		for _, id := range []byte{secType, secImport, secGlobal, secExport} {
			if b, ok := missing[id]; ok && (before == 0xFF || order(id) < order(before)) {
				out = append(out, section{id: id, body: b})
				delete(missing, id)
			}
		}
	}
	for _, s := range secs {
		if s.id != secCustom {
			place(s.id)
		}
		body, keep := s.body, true
		var err error
		switch s.id {
		case secCustom:
			var name string
			name, _, err = customName(s.body)
			switch {
			case err != nil:
			case strings.HasPrefix(name, ".debug_") || name == "sourceMappingURL":
				keep = false
			case name == "name":
				body, err = renameFunctions(s.body, sh)
			}
		case secType:
			if addType {
				body, err = appendToVec(s.body, newType)
			}
			delete(missing, secType)
		case secImport:
			body, err = appendToVec(s.body, newImport)
			delete(missing, secImport)
		case secGlobal:
			if body, err = shiftGlobals(s.body, sh); err == nil {
				body, err = appendToVec(body, newGlobal)
			}
			delete(missing, secGlobal)
		case secExport:
			if body, err = shiftExports(s.body, sh); err == nil {
				body, err = appendToVec(body, newExport)
			}
			delete(missing, secExport)
		case secStart:
			var idx uint32
			if idx, err = (&reader{b: s.body}).u32(); err == nil {
				body = appendU32(nil, sh.fn(idx))
			}
		case secElement:
			body, err = shiftElements(s.body, sh)
		case secCode:
			body, err = meterCode(s.body, global, m.importedFuncs, sh)
		}
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
		if keep {
			out = append(out, section{id: s.id, body: body})
		}
	}
	place(0xFF)

	res := append(make([]byte, 0, len(wasm)+len(wasm)/8+64), wasm[:8]...)
	for _, s := range out {
		res = append(res, s.id)
		res = appendU32(res, uint32(len(s.body)))
		res = append(res, s.body...)
	}
	return res, nil
}

// layout is what the rewrite reads of a module before it rewrites it.
type layout struct {
	types                          uint32
	voidType                       int64 // the index of a type () -> (), or -1
	importedFuncs, importedGlobals uint32
	ownGlobals                     uint32
}

// readTypes reads the type section: how many, and the first () -> ().
func (m *layout) readTypes(b []byte) error {
	m.voidType = -1
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	m.types = n
	for i := range n {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("type %d of form %#x, which the meter does not know", i, form)
		}
		params, err := r.u32()
		if err != nil {
			return err
		}
		if err := r.skip(int(params)); err != nil {
			return err
		}
		results, err := r.u32()
		if err != nil {
			return err
		}
		if err := r.skip(int(results)); err != nil {
			return err
		}
		if params == 0 && results == 0 && m.voidType < 0 {
			m.voidType = int64(i)
		}
	}
	return nil
}

// shift moves function indices past the imported functions up by one,
// for the refill import placed after them.
type shift struct{ from uint32 }

func (s shift) fn(idx uint32) uint32 {
	if idx >= s.from {
		return idx + 1
	}
	return idx
}

// shiftExports moves the function indices of an export section.
func shiftExports(b []byte, sh shift) ([]byte, error) {
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		start := r.i
		if err := r.name(); err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		out = append(out, r.b[start:r.i]...)
		idx, err := r.u32()
		if err != nil {
			return nil, err
		}
		if kind == 0x00 {
			idx = sh.fn(idx)
		}
		return appendU32(out, idx), nil
	})
}

// rewriteVec rewrites the vector b (a count, then its items) item by item:
// item reads one from r and appends what replaces it to out.
func rewriteVec(b []byte, item func(r *reader, out []byte) ([]byte, error)) ([]byte, error) {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(b)+8), n)
	for range n {
		if out, err = item(&r, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// shiftGlobals moves the function indices (ref.func) of the globals'
// initial values.
func shiftGlobals(b []byte, sh shift) ([]byte, error) {
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		start := r.i
		if err := r.skip(2); err != nil { // its type and mutability
			return nil, err
		}
		return copyExpr(append(out, r.b[start:r.i]...), r, sh)
	})
}

// shiftElements moves the function indices of an element section, in
// each of its segment's eight forms.
func shiftElements(b []byte, sh shift) ([]byte, error) {
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		flags, err := r.u32()
		if err != nil {
			return nil, err
		}
		if flags > 7 {
			return nil, fmt.Errorf("an element segment of form %d", flags)
		}
		out = appendU32(out, flags)
		if flags&0x02 != 0 && flags&0x01 == 0 { // an explicit table index
			idx, err := r.u32()
			if err != nil {
				return nil, err
			}
			out = appendU32(out, idx)
		}
		if flags&0x01 == 0 { // active: the offset
			if out, err = copyExpr(out, r, sh); err != nil {
				return nil, err
			}
		}
		if flags&0x03 != 0 { // the element kind or reference type
			k, err := r.byte()
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
		items, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = appendU32(out, items)
		for range items {
			if flags&0x04 == 0 { // function indices
				idx, err := r.u32()
				if err != nil {
					return nil, err
				}
				out = appendU32(out, sh.fn(idx))
			} else if out, err = copyExpr(out, r, sh); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}

// copyExpr copies a constant expression up to its end, moving the
// function indices of ref.func.
func copyExpr(out []byte, r *reader, sh shift) ([]byte, error) {
	for depth := 0; ; {
		at := r.i
		op, err := skipInstr(r)
		if err != nil {
			return nil, err
		}
		out = copyInstr(out, r.b[at:r.i], op, sh)
		switch op {
		case opBlock, opLoop, opIf:
			depth++
		case opEnd:
			if depth == 0 {
				return out, nil
			}
			depth--
		}
	}
}

// copyInstr appends the instruction ins, with the function index of a
// call, return_call or ref.func moved.
func copyInstr(out, ins []byte, op byte, sh shift) []byte {
	switch op {
	case opCall, opReturnCall, opRefFunc:
		r := reader{b: ins, i: 1}
		idx, _ := r.u32() // read once already
		out = append(out, op)
		return appendU32(out, sh.fn(idx))
	}
	return append(out, ins...)
}

// renameFunctions moves the function indices of the name section: those
// of its function names, local names and label names; its other
// subsections do not name functions.
func renameFunctions(b []byte, sh shift) ([]byte, error) {
	_, at, err := customName(b)
	if err != nil {
		return nil, err
	}
	out := append(make([]byte, 0, len(b)+8), b[:at]...)
	r := reader{b: b, i: at}
	for r.i < len(b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(r.i)+uint64(size) > uint64(len(b)) {
			return nil, errors.New("a name subsection past its section's end")
		}
		sub := b[r.i : r.i+int(size)]
		r.i += int(size)
		if id == 1 || id == 2 || id == 3 {
			if sub, err = renameMap(sub, sh, id != 1); err != nil {
				return nil, fmt.Errorf("name subsection %d: %w", id, err)
			}
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(sub)))
		out = append(out, sub...)
	}
	return out, nil
}

// renameMap moves the function indices of a name map (a vector of index
// and name), or of an indirect one (a vector of index and name map).
func renameMap(b []byte, sh shift, indirect bool) ([]byte, error) {
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		idx, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = appendU32(out, sh.fn(idx))
		start := r.i
		if indirect {
			m, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range m {
				if _, err := r.u32(); err != nil {
					return nil, err
				}
				if err := r.name(); err != nil {
					return nil, err
				}
			}
		} else if err := r.name(); err != nil {
			return nil, err
		}
		return append(out, r.b[start:r.i]...), nil
	})
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
		return secMemory*2 + 1 // after memory, before global
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

// readImports counts the function and global imports.
func (m *layout) readImports(b []byte) error {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		for range 2 { // module and name
			if err := r.name(); err != nil {
				return err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00: // a function: its type index
			m.importedFuncs++
			_, err = r.u32()
		case 0x01: // a table: its element type, then its limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 0x02: // a memory: its limits
			err = r.limits()
		case 0x03: // a global: its type and mutability
			m.importedGlobals++
			err = r.skip(2)
		case 0x04: // a tag: an attribute and a type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return fmt.Errorf("an import of kind %#x", kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
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

// vecOf is a vector of one item, encoded.
func vecOf(item []byte) []byte { return append(appendU32(nil, 1), item...) }

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
