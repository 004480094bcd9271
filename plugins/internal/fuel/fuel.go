// Package fuel meters a WebAssembly module's work deterministically: it
// rewrites the module's binary so that the module charges a counter as it
// runs, and asks the host for more when the counter runs out.
//
// [Instrument] adds one mutable i64 global to the module, exported as
// [Export], one imported function, [ImportModule].[ImportName] (i32) -> (),
// and charges: at the entry of every function, the header of every loop,
// and the join points between (below). A charge subtracts its cost from
// the global; some charges, and a test after every call, then test it:
// when the global is below zero, the test calls the import with 0, and the
// host gives more fuel (the global is set higher) or ends the call (the
// import panics, which traps the call). The host sets the global before a
// call and reads it after: the fuel a call used is what it was given
// minus what is left, which may be below zero when the call returns (the
// last charges since a test).
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
// An instruction whose work grows with an operand known only at run time
// is charged that work before it runs, and tested: memory.fill,
// memory.copy and memory.init one unit per 16 bytes, table.fill,
// table.copy and table.init one per element; memory.grow and table.grow
// are charged after they succeed, for the memory or table they leave (a
// grow may copy all of it). A call of an imported function is charged as
// its [Import] says: a fixed cost, a cost from its arguments (charged and
// tested before the call), or a gate: the import is called with the
// gate's number first, and the host charges what the call will cost.
//
// So the guest returns to the host at least once per global's worth of
// fuel and a few thousand more, whatever it runs (loops, call trees,
// recursion, long straight-line code, bulk memory), and the same call on
// the same state uses the same fuel: which charges test changes when the
// host hears of it, never what a call is charged.
//
// The rewrite assumes a valid module: the caller validates the original
// first (a module that is invalid as written could name the meter's
// global, type or import, whose indices it does not have). It refuses
// what it could not meter soundly: an import of the meter's own module, a
// table or reference of an import that is charged by its arguments or
// gated (a call through the table would not be charged), and an
// instruction or a form the decoder does not know (the proposals wazero
// does not run: exception handling, GC, typed function references).
//
// The check import goes after the module's imported functions, so every
// defined function's index moves up by one: the rewrite moves them in the
// code (call, return_call, ref.func), the exports, the start function, the
// element segments, the globals' initial values and the name section.
// DWARF custom sections (.debug_*), whose code offsets the rewrite would
// make wrong, are dropped. The rewrite reads and writes each byte a
// bounded number of times: its time is linear in the module's size.
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

// The function every metered module imports, (i32) -> (): called with 0
// when a charge takes the global below zero (the host then refills the
// global, and goes on, or ends the call, by a trap through a panic of the
// host function), and with an [Import]'s Gate before each call of that
// import (the host charges the call's cost). Its calls are where a long
// guest returns to Go: the host checks the call's deadline there.
const (
	ImportModule = "agentic:host/fuel"
	ImportName   = "check"
)

// ImportKind is the kind of an import: a function, table, memory, global
// or tag.
type ImportKind byte

// The kinds of imports, as the binary format numbers them.
const (
	ImportFunction ImportKind = 0
	ImportTable    ImportKind = 1
	ImportMemory   ImportKind = 2
	ImportGlobal   ImportKind = 3
	ImportTag      ImportKind = 4
)

// Import is how the rewrite treats a function import: under which module
// name the metered module imports it, and what each call of it costs. A
// call is charged 1 beyond these, as every instruction is.
type Import struct {
	// Module is the module name the metered module imports the function
	// from; "" keeps the original's.
	Module string
	// Base is charged for every call, with the region the call is in.
	Base int64
	// Args are charged from the call's arguments, before the call, and
	// tested: the arguments named must be i32.
	Args []ArgCost
	// Gate, when above zero, is passed to the check import before every
	// call of the import: the host charges the call then, from what it
	// knows (a host function's cost may depend on the host's state).
	Gate int32
}

// ArgCost charges (argument × Per) >> Shift units for a call, Param
// naming the argument (0 is the first).
type ArgCost struct {
	Param int
	Per   int64 // 1 to 2^20; 0 means 1
	Shift uint8 // 0 to 31
}

// Options tunes the instrumentation.
type Options struct {
	// Imports tells how each import is treated, or why it is refused;
	// kind is what the import is. Default: nil, every import kept as it
	// is and each call charged 1.
	Imports func(module, name string, kind ImportKind) (Import, error)
	// StartExport, when set, turns the module's start function into an
	// export of that name (and drops the start section), so that the
	// host runs it as a call, on the call's fuel and deadline, after
	// instantiating the module. Default: "", the start function stays.
	StartExport string
	// MaxTableElements bounds the elements of the module's tables
	// together: a module whose tables start with more is refused, and each
	// table's maximum is lowered so that the maxima add up to at most
	// this (the first tables take what is left after every table's
	// initial size, in order), so that table.grow fails past it.
	// Default: 0, tables are left as they are.
	MaxTableElements uint32
}

// Instrument returns the metered form of the module wasm, or why it cannot
// be metered. The input is not modified; it must be a valid module.
func Instrument(wasm []byte, opts Options) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("fuel: not a WebAssembly module (no \\0asm magic)")
	}
	if binary.LittleEndian.Uint32(wasm[4:8]) != 1 {
		return nil, fmt.Errorf("fuel: WebAssembly binary version %d, want 1", binary.LittleEndian.Uint32(wasm[4:8]))
	}
	var secs []section
	last := -1 // the order of the last section that is not custom
	for r := (reader{b: wasm, i: 8}); r.i < len(wasm); {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		if id != secCustom {
			// Out of order or repeated: invalid, and the rewrite, which
			// drops or merges some sections, must not make it valid.
			if order(id) <= last {
				return nil, fmt.Errorf("fuel: section %d out of order or repeated", id)
			}
			last = order(id)
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

	// What the rewrite needs to know first: the types, the imports (the
	// check import goes after the imported functions, so every defined
	// function's index moves up by one), the defined functions' types,
	// the globals (the fuel global goes after them all), and whether the
	// module has a start function.
	m := layout{checkType: -1, opts: opts}
	for _, s := range secs {
		var err error
		switch s.id {
		case secType:
			err = m.readTypes(s.body)
		case secImport:
			err = m.readImports(s.body)
		case secFunction:
			err = m.readFunctions(s.body)
		case secGlobal:
			m.ownGlobals, err = (&reader{b: s.body}).u32()
		case secExport:
			err = m.checkExportsFree(s.body)
		case secStart:
			m.start, err = (&reader{b: s.body}).u32()
			m.hasStart = true
		}
		if err != nil {
			return nil, fmt.Errorf("fuel: section %d: %w", s.id, err)
		}
	}
	if m.hasStart {
		if err := m.function(m.start); err != nil {
			return nil, fmt.Errorf("fuel: the start function: %w", err)
		}
		if t := m.types[m.typeOf(m.start)]; len(t.params) > 0 || len(t.results) > 0 {
			return nil, errors.New("fuel: the start function takes or returns values")
		}
	}
	m.declared = make([]bool, uint64(len(m.funcs))+uint64(len(m.funcTypes)))
	global := m.importedGlobals + m.ownGlobals
	if global < m.importedGlobals || uint32(len(m.types)) == math.MaxUint32 || m.importedFuncs() == math.MaxUint32 {
		return nil, errors.New("fuel: too many globals, types or imports")
	}
	sh := shift{from: m.importedFuncs()}

	checkType := []byte{0x60, 0x01, valI32, 0x00}
	typeIdx, addType := m.checkType, m.checkType < 0
	if addType {
		typeIdx = int64(len(m.types))
	}
	newImport := appendName(appendName(nil, ImportModule), ImportName)
	newImport = append(newImport, 0x00)
	newImport = appendU32(newImport, uint32(typeIdx))
	newGlobal := []byte{valI64, 0x01, opI64Const, 0x00, opEnd} // no fuel until the host gives some
	newExports := [][]byte{appendU32(append(appendName(nil, Export), exportGlobal), global)}
	startExport := m.hasStart && opts.StartExport != ""

	// The sections to add, where the binary format's order puts them
	// when the module has none of their kind.
	missing := map[byte][]byte{
		secImport: vecOf(newImport),
		secGlobal: vecOf(newGlobal),
	}
	if addType {
		missing[secType] = vecOf(checkType)
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
	if startExport {
		// The start function becomes an export, written with the others.
		newExports = append(newExports, appendU32(append(appendName(nil, opts.StartExport), 0x00), sh.fn(m.start)))
	}
	exportsBody := func(old []byte) ([]byte, error) {
		body := appendU32(nil, 0)
		if old != nil {
			var err error
			if body, err = shiftExports(old, sh, &m); err != nil {
				return nil, err
			}
		}
		for _, e := range newExports {
			var err error
			if body, err = appendToVec(body, e); err != nil {
				return nil, err
			}
		}
		return body, nil
	}
	missing[secExport], _ = exportsBody(nil) // a module without exports gets the new ones alone
	// The sections to add go before the custom sections that end the
	// module, if any: so the module ends as the original does (wazero
	// reads a custom section's name past its section, so one that ends
	// the original short would be completed by what follows it).
	tail := len(secs)
	for tail > 0 && secs[tail-1].id == secCustom {
		tail--
	}
	for i, s := range secs {
		if i == tail {
			place(0xFF)
		}
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
				body, err = appendToVec(s.body, checkType)
			}
			delete(missing, secType)
		case secImport:
			if body, err = m.rewriteImports(s.body); err == nil {
				body, err = appendToVec(body, newImport)
			}
			delete(missing, secImport)
		case secTable:
			body, err = m.limitTables(s.body)
		case secGlobal:
			if body, err = shiftGlobals(s.body, sh, &m); err == nil {
				body, err = appendToVec(body, newGlobal)
			}
			delete(missing, secGlobal)
		case secExport:
			body, err = exportsBody(s.body)
			delete(missing, secExport)
		case secStart:
			if startExport {
				keep = false
				break
			}
			var idx uint32
			if idx, err = (&reader{b: s.body}).u32(); err == nil {
				body = appendU32(nil, sh.fn(idx))
			}
		case secElement:
			body, err = shiftElements(s.body, sh, &m)
		case secCode:
			body, err = meterCode(s.body, &m, global, sh)
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

// funcType is a function type's parameters and results (value types).
type funcType struct{ params, results []byte }

// funcImport is an imported function: its type and how it is charged.
type funcImport struct {
	module, name string
	typ          uint32
	rule         Import
}

// charged reports whether a call of the import is charged from its
// arguments or gated: what a call through a table or a reference would
// bypass.
func (f *funcImport) charged() bool { return len(f.rule.Args) > 0 || f.rule.Gate > 0 }

// layout is what the rewrite reads of a module before it rewrites it.
type layout struct {
	opts            Options
	types           []funcType
	checkType       int64 // the index of a type (i32) -> (), or -1
	funcs           []funcImport
	funcTypes       []uint32 // the defined functions' types
	importedGlobals uint32
	ownGlobals      uint32
	hasStart        bool
	start           uint32 // the start function
	declared        []bool // the functions the module declares references of
}

func (m *layout) importedFuncs() uint32 { return uint32(len(m.funcs)) }

// The original module's indices, checked wherever the module names a
// global, function or type (see funcCode.names): what lies past them is
// the meter's.

func (m *layout) global(idx uint32) error {
	if uint64(idx) >= uint64(m.importedGlobals)+uint64(m.ownGlobals) {
		return fmt.Errorf("global %d of a module of %d", idx, uint64(m.importedGlobals)+uint64(m.ownGlobals))
	}
	return nil
}

func (m *layout) function(idx uint32) error {
	if n := uint64(len(m.funcs)) + uint64(len(m.funcTypes)); uint64(idx) >= n {
		return fmt.Errorf("function %d of a module of %d", idx, n)
	}
	return nil
}

// typeOf is the type of the function idx, which must be in range.
func (m *layout) typeOf(idx uint32) uint32 {
	if idx < m.importedFuncs() {
		return m.funcs[idx].typ
	}
	return m.funcTypes[idx-m.importedFuncs()]
}

// declare notes that the module declares a reference of the function idx
// (an export, an element, a global's initial value): a ref.func in code
// may name only those.
func (m *layout) declare(idx uint32) {
	if uint64(idx) < uint64(len(m.declared)) {
		m.declared[idx] = true
	}
}

func (m *layout) typeIndex(idx int64) error {
	if idx < 0 || idx >= int64(len(m.types)) {
		return fmt.Errorf("type %d of a module of %d", idx, len(m.types))
	}
	return nil
}

// readTypes reads the type section: each type's parameters and results,
// and the first (i32) -> ().
func (m *layout) readTypes(b []byte) error {
	m.checkType = -1
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	if uint64(n) > uint64(len(b)) {
		return fmt.Errorf("%d types in %d bytes", n, len(b))
	}
	m.types = make([]funcType, 0, n)
	for i := range n {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("type %d of form %#x, which the meter does not know", i, form)
		}
		var t funcType
		for _, list := range []*[]byte{&t.params, &t.results} {
			k, err := r.u32()
			if err != nil {
				return err
			}
			at := r.i
			if err := r.skip(int(k)); err != nil {
				return err
			}
			*list = r.b[at:r.i]
			for _, v := range *list {
				if err := valType(v); err != nil {
					return fmt.Errorf("type %d: %w", i, err)
				}
			}
		}
		if len(t.params) == 1 && t.params[0] == valI32 && len(t.results) == 0 && m.checkType < 0 {
			m.checkType = int64(i)
		}
		m.types = append(m.types, t)
	}
	return r.end()
}

// end fails if bytes are left after a section's items.
func (r *reader) end() error {
	if r.i != len(r.b) {
		return fmt.Errorf("%d bytes after the section's items", len(r.b)-r.i)
	}
	return nil
}

// readFunctions reads the function section: the defined functions' types.
func (m *layout) readFunctions(b []byte) error {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	if uint64(n) > uint64(len(b)) {
		return fmt.Errorf("%d functions in %d bytes", n, len(b))
	}
	m.funcTypes = make([]uint32, n)
	for i := range m.funcTypes {
		if m.funcTypes[i], err = r.u32(); err != nil {
			return err
		}
		if m.funcTypes[i] >= uint32(len(m.types)) {
			return fmt.Errorf("function %d of type %d, past the %d types", i, m.funcTypes[i], len(m.types))
		}
	}
	return r.end()
}

// shift moves function indices past the imported functions up by one,
// for the check import placed after them.
type shift struct{ from uint32 }

func (s shift) fn(idx uint32) uint32 {
	if idx >= s.from {
		return idx + 1
	}
	return idx
}

// shiftExports moves the function indices of an export section; m checks
// the functions and globals it names (nil: no check).
func shiftExports(b []byte, sh shift, m *layout) ([]byte, error) {
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
		switch {
		case m == nil:
		case kind == 0x00:
			if err = m.function(idx); err == nil {
				m.declare(idx)
			}
		case kind == exportGlobal:
			err = m.global(idx)
		}
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
	if r.i != len(b) {
		// Bytes past the items: invalid, and they must not vanish in the
		// rewrite.
		return nil, fmt.Errorf("%d bytes after a section's %d items", len(b)-r.i, n)
	}
	return out, nil
}

// shiftGlobals moves the function indices (ref.func) of the globals'
// initial values.
func shiftGlobals(b []byte, sh shift, m *layout) ([]byte, error) {
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		start := r.i
		if err := r.globalType(); err != nil {
			return nil, err
		}
		return copyExpr(append(out, r.b[start:r.i]...), r, sh, m)
	})
}

// shiftElements moves the function indices of an element section, in
// each of its segment's eight forms.
func shiftElements(b []byte, sh shift, m *layout) ([]byte, error) {
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
			if out, err = copyExpr(out, r, sh, m); err != nil {
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
				if err := m.function(idx); err != nil {
					return nil, err
				}
				if err := m.referable(idx); err != nil {
					return nil, err
				}
				m.declare(idx)
				out = appendU32(out, sh.fn(idx))
			} else if out, err = copyExpr(out, r, sh, m); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}

// copyExpr copies a constant expression up to its end, moving the
// function indices of ref.func (which must not name an import charged by
// its arguments or gated).
func copyExpr(out []byte, r *reader, sh shift, m *layout) ([]byte, error) {
	for depth := 0; ; {
		at := r.i
		op, err := skipInstr(r)
		if err != nil {
			return nil, err
		}
		switch op {
		case opRefFunc:
			idx, _ := (&reader{b: r.b, i: at + 1}).u32() // read once already
			if err := m.function(idx); err != nil {
				return nil, err
			}
			if err := m.referable(idx); err != nil {
				return nil, err
			}
			m.declare(idx)
		case opGlobalGet, opGlobalSet:
			idx, _ := (&reader{b: r.b, i: at + 1}).u32()
			if err := m.global(idx); err != nil {
				return nil, err
			}
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
	valI32       = 0x7F
	valI64       = 0x7E
	valF32       = 0x7D
	valF64       = 0x7C
	valV128      = 0x7B
	valFuncref   = 0x70
	valExternref = 0x6F
	exportGlobal = 0x03
)

type section struct {
	id   byte
	body []byte
}

// readImports reads the import section: each function import's module,
// name and type, and how it is charged (Options.Imports); the globals
// imported. An import of the meter's own module is refused, whatever
// Options.Imports says.
func (m *layout) readImports(b []byte) error {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := range n {
		var names [2]string
		for j := range names {
			at := r.i
			if err := r.name(); err != nil {
				return err
			}
			names[j] = nameAt(r.b[at:r.i])
		}
		module, name := names[0], names[1]
		kind, err := r.byte()
		if err != nil {
			return err
		}
		if module == ImportModule {
			return fmt.Errorf("import %d (%s.%s): the module %q is the meter's own", i, module, name, ImportModule)
		}
		if kind > byte(ImportTag) {
			return fmt.Errorf("an import of kind %#x", kind)
		}
		var rule Import
		if m.opts.Imports != nil {
			if rule, err = m.opts.Imports(module, name, ImportKind(kind)); err != nil {
				return fmt.Errorf("import %d (%s.%s): %w", i, module, name, err)
			}
		}
		if ImportKind(kind) == ImportTable && m.opts.MaxTableElements > 0 {
			return fmt.Errorf("import %d (%s.%s): an imported table, whose size the meter cannot bound", i, module, name)
		}
		switch ImportKind(kind) {
		case ImportFunction:
			typ, err := r.u32()
			if err != nil {
				return err
			}
			if typ >= uint32(len(m.types)) {
				return fmt.Errorf("import %d (%s.%s) of type %d, past the %d types", i, module, name, typ, len(m.types))
			}
			if err := checkRule(rule, m.types[typ]); err != nil {
				return fmt.Errorf("import %d (%s.%s): %w", i, module, name, err)
			}
			m.funcs = append(m.funcs, funcImport{module: module, name: name, typ: typ, rule: rule})
		case ImportTable: // its element type, then its limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case ImportMemory:
			err = r.limits()
		case ImportGlobal: // its type and mutability
			m.importedGlobals++
			err = r.globalType()
		case ImportTag: // an attribute and a type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		}
		if err != nil {
			return err
		}
	}
	return r.end()
}

// checkRule checks an import's rule against its type.
func checkRule(rule Import, t funcType) error {
	if rule.Base < 0 || rule.Gate < 0 {
		return errors.New("a negative cost or gate")
	}
	for _, a := range rule.Args {
		if a.Param < 0 || a.Param >= len(t.params) || t.params[a.Param] != valI32 {
			return fmt.Errorf("charged by its argument %d, which is not an i32", a.Param)
		}
		if a.Per < 0 || a.Per > 1<<20 || a.Shift > 31 {
			return fmt.Errorf("charged %d >> %d by its argument %d, out of range", a.Per, a.Shift, a.Param)
		}
	}
	return nil
}

// nameAt decodes a name (its length, then its bytes) read already.
func nameAt(b []byte) string {
	r := reader{b: b}
	n, _ := r.u32()
	return string(b[r.i : r.i+int(n)])
}

// rewriteImports returns the import section with each function import
// under the module name its rule gives.
func (m *layout) rewriteImports(b []byte) ([]byte, error) {
	fn := 0
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		start := r.i
		if err := r.name(); err != nil {
			return nil, err
		}
		module := r.b[start:r.i]
		at := r.i
		if err := r.name(); err != nil {
			return nil, err
		}
		rest := r.i
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		switch ImportKind(kind) {
		case ImportFunction:
			_, err = r.u32()
		case ImportTable:
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case ImportMemory:
			err = r.limits()
		case ImportGlobal:
			err = r.globalType()
		case ImportTag:
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		}
		if err != nil {
			return nil, err
		}
		if ImportKind(kind) == ImportFunction {
			if to := m.funcs[fn].rule.Module; to != "" {
				module = appendName(nil, to)
			}
			fn++
		}
		out = append(out, module...)
		out = append(out, r.b[at:rest]...)
		return append(out, r.b[rest:r.i]...), nil
	})
}

// referable fails if the function idx (an index of the original module)
// is an import charged by its arguments or gated: a call through a table
// or a reference would bypass its charge.
func (m *layout) referable(idx uint32) error {
	if idx < m.importedFuncs() && m.funcs[idx].charged() {
		f := m.funcs[idx]
		return fmt.Errorf("a table or reference holds the import %s.%s, which is charged at each call: call it directly", f.module, f.name)
	}
	return nil
}

// limitTables returns the table section with every table's maximum
// lowered to fit Options.MaxTableElements together (see there), or
// refuses tables that start with more.
func (m *layout) limitTables(b []byte) ([]byte, error) {
	limit := uint64(m.opts.MaxTableElements)
	if limit == 0 {
		return b, nil
	}
	// First the initial sizes: what the tables take whatever they do.
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	var mins uint64
	for range n {
		elem, err := r.byte()
		if err != nil {
			return nil, err
		}
		if elem != valFuncref && elem != valExternref {
			return nil, fmt.Errorf("a table of element type %#x, which the meter does not know", elem)
		}
		min, _, _, err := r.tableLimits()
		if err != nil {
			return nil, err
		}
		mins += uint64(min)
	}
	if mins > limit {
		return nil, fmt.Errorf("its tables start with %d elements, the limit is %d", mins, limit)
	}
	left := limit - mins
	return rewriteVec(b, func(r *reader, out []byte) ([]byte, error) {
		elem, _ := r.byte() // read once already
		min, max, hasMax, _ := r.tableLimits()
		grow := left
		if hasMax {
			grow = min64(grow, uint64(max)-uint64(min))
		}
		left -= grow
		out = append(out, elem, 0x01)
		out = appendU32(out, min)
		return appendU32(out, uint32(uint64(min)+grow)), nil
	})
}

func min64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// valType fails for a value type the meter does not know: the typed
// references of the GC and function-references proposals, whose encoding
// takes more than a byte.
func valType(v byte) error {
	switch v {
	case valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		return nil
	}
	return fmt.Errorf("value type %#x, which the meter does not know", v)
}

// globalType reads a global's type and mutability.
func (r *reader) globalType() error {
	v, err := r.byte()
	if err != nil {
		return err
	}
	if err := valType(v); err != nil {
		return err
	}
	mut, err := r.byte()
	if err != nil {
		return err
	}
	if mut > 1 {
		return fmt.Errorf("a global's mutability %#x", mut)
	}
	return nil
}

// tableLimits reads a table's limits: 32-bit, unshared.
func (r *reader) tableLimits() (min, max uint32, hasMax bool, err error) {
	flags, err := r.byte()
	if err != nil {
		return 0, 0, false, err
	}
	if flags > 0x01 {
		return 0, 0, false, fmt.Errorf("table limits flags %#x, which the meter does not know", flags)
	}
	if min, err = r.u32(); err != nil {
		return 0, 0, false, err
	}
	if flags == 0x01 {
		if max, err = r.u32(); err != nil {
			return 0, 0, false, err
		}
		if max < min {
			return 0, 0, false, fmt.Errorf("a table of at least %d elements and at most %d", min, max)
		}
	}
	return min, max, flags == 0x01, nil
}

// checkExportsFree fails if the module exports a name the rewrite adds
// already.
func (m *layout) checkExportsFree(b []byte) error {
	r := reader{b: b}
	n, err := r.u32()
	if err != nil {
		return err
	}
	taken := [][]byte{appendName(nil, Export)}
	if m.opts.StartExport != "" {
		taken = append(taken, appendName(nil, m.opts.StartExport))
	}
	for range n {
		start := r.i
		if err := r.name(); err != nil {
			return err
		}
		for _, t := range taken {
			if bytes.Equal(r.b[start:r.i], t) {
				return fmt.Errorf("the module exports %q already", nameAt(t))
			}
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
