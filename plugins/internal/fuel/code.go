package fuel

import (
	"errors"
	"fmt"
)

// maxLocals bounds a function's locals (its parameters, its own, the
// meter's), as browsers do: more are refused.
const maxLocals = 50_000

// splitCost is the cost past which a region ends at the next join point.
const splitCost = 32

// Opcodes the rewrite reads or writes.
const (
	opUnreachable        = 0x00
	opBlock              = 0x02
	opLoop               = 0x03
	opIf                 = 0x04
	opElse               = 0x05
	opEnd                = 0x0B
	opBr                 = 0x0C
	opBrIf               = 0x0D
	opBrTable            = 0x0E
	opReturn             = 0x0F
	opCall               = 0x10
	opCallIndirect       = 0x11
	opReturnCall         = 0x12
	opReturnCallIndirect = 0x13
	opRefFunc            = 0xD2
	opGlobalGet          = 0x23
	opGlobalSet          = 0x24
	opI64Const           = 0x42
	opI64LtS             = 0x53
	opI64Sub             = 0x7D
	opLocalGet           = 0x20
	opLocalSet           = 0x21
	opLocalTee           = 0x22
	opI32Const           = 0x41
	opI32Ne              = 0x47
	opI64Add             = 0x7C
	opI64Mul             = 0x7E
	opI64Shl             = 0x86
	opI64ShrU            = 0x88
	opI64ExtendI32U      = 0xAD
	opMemoryGrow         = 0x40
	opPrefixFC           = 0xFC
)

// The 0xFC instructions whose work grows with an operand.
const (
	fcMemoryInit = 8
	fcMemoryCopy = 10
	fcMemoryFill = 11
	fcTableInit  = 12
	fcTableCopy  = 14
	fcTableGrow  = 15
	fcTableFill  = 17
)

// fcSub is the sub-opcode of the 0xFC instruction at code[at:].
func fcSub(code []byte, at int) uint32 {
	sub, _ := (&reader{b: code, i: at + 1}).u32() // read once already
	return sub
}

// bulk reports whether the 0xFC instruction sub works through a length it
// takes from the stack (its last operand, an i32).
func bulk(sub uint32) bool {
	switch sub {
	case fcMemoryInit, fcMemoryCopy, fcMemoryFill, fcTableInit, fcTableCopy, fcTableFill:
		return true
	}
	return false
}

// memoryShift is how a length in bytes turns into fuel: one unit per 16
// bytes a bulk instruction fills or copies (about the time of one simple
// instruction here), 4,096 per page (64 KiB) of memory a grow leaves.
const memoryShift = 4

// meterCode returns the code section with the charges and tests of every
// function body (see meterBody), on the global g, calling the check import
// (m's imported functions' count) when the fuel runs out; the indices of
// the functions called move as sh says.
func meterCode(sec []byte, m *layout, g uint32, sh shift) ([]byte, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if n != uint32(len(m.funcTypes)) {
		return nil, fmt.Errorf("%d function bodies for %d functions", n, len(m.funcTypes))
	}
	out := appendU32(make([]byte, 0, len(sec)+len(sec)/8), n)
	var body []byte
	var s scratch
	fc := &funcCode{layout: m, g: g, check: m.importedFuncs(), sh: sh}
	for f := range n {
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", f, err)
		}
		if uint64(r.i)+uint64(size) > uint64(len(sec)) {
			return nil, fmt.Errorf("function %d: its body ends past the section", f)
		}
		code := sec[r.i : r.i+int(size)]
		r.i += int(size)
		fc.params = uint32(len(m.types[m.funcTypes[f]].params))
		body, err = meterBody(body[:0], &s, code, fc)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", f, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.i != len(sec) {
		return nil, errors.New("bytes after the last function")
	}
	return out, nil
}

// funcCode is what meterBody needs to know of the module and the function.
type funcCode struct {
	*layout
	g      uint32 // the fuel global
	check  uint32 // the check import
	sh     shift
	params uint32 // the function's parameters
}

// region is what one charge pays for: a stretch of a body entered only at
// its start, at the cost of all its instructions.
type region struct {
	at     int   // where its charge goes: an offset into the body
	cost   int64 // its instructions
	test   bool  // its charge tests the fuel
	in     int32 // its ways in: a node, or none
	credit int64 // what the charges since the last test cost, at its end
}

// The ways into a point of a body are a node of a graph built as the first
// pass reads the body: the way out of one region (at its end, after its
// charge), the way out of a call (settled: a test came after it), or a
// join of other nodes. Each node is made once and never changes, and its
// kids are older than itself, so that one pass over the nodes in order
// computes every region's credit: the pass is linear in the body's size
// however its branches meet (lists of ways merged at every join made it
// quadratic in the number of regions branching to one end).
type node struct {
	region int32 // the region it is the way out of, or noRegion
	kids   int32 // a join's kids: scratch.kids[kids:kids+nkids]
	nkids  int32
	fresh  bool  // it may come from the function's entry through no test
	credit int64 // what the charges since the last test cost on it
}

const (
	none     = -1 // no way: the code after a branch, until a join
	settled  = 0  // the node of the way out of a call: its test came after it
	noRegion = -1
)

// creditLimit bounds what the charges between two tests may cost on a path
// through one function: past it, a charge tests.
const creditLimit = 1000

// meterBody appends the metered form of a function body (its locals, then
// its code) to dst. m is scratch space.
//
// Every charge subtracts its cost from the fuel; a test, when the fuel is
// below zero, calls the check import, where the host gives more fuel or
// ends the call. Tests are what costs (the call they may make keeps
// compiled code from holding values in registers across them), so only
// some charges test, and a test follows every call:
//
//   - the charge at a loop's header, so that every turn of a loop tests;
//   - the charge at the function's entry when a call can come before any
//     loop's header, so that a recursion tests at every level;
//   - a test right after every call of a function of the module (call and
//     call_indirect), so that a guest returns from a call settled, however
//     deep its stack unwinds;
//   - the charge of a region whose charges since the last test, on any way
//     in, would cost more than creditLimit.
//
// A call of an imported function counts for none of these (a host
// function is not metered, and the host's do not call the module back);
// it is charged as its Import says.
//
// So between two tests a guest runs the charges of at most about
// creditLimit instructions in a function, and as many in a function it
// calls before that one's first test (which comes before any call of its
// own, or is the test after the call): it reaches the check within a few
// thousand instructions of running out. What it is charged does not
// depend on the tests.
//
// Besides, the instructions whose work grows with an operand are charged
// it at run time (see appendBulk), and calls of imports charged by their
// arguments or gated are charged before the call (appendImportCharge):
// those need scratch locals, added after the function's own.
func meterBody(dst []byte, m *scratch, code []byte, fc *funcCode) ([]byte, error) {
	r := reader{b: code}
	// The locals: a vector of (count, type).
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	locals, groups := uint64(fc.params), r.i
	for range n {
		k, err := r.u32()
		if err != nil {
			return nil, err
		}
		if locals += uint64(k); locals > maxLocals {
			return nil, fmt.Errorf("more than %d locals", maxLocals)
		}
		v, err := r.byte()
		if err != nil {
			return nil, err
		}
		if err := valType(v); err != nil {
			return nil, err
		}
	}
	start := r.i

	// First pass: the regions and their costs. A region is entered only
	// at its start (its charge), and its cost is all its instructions,
	// which bounds what any path through it runs: a new region begins at
	// every loop's header, and at a join point (the end of a block or if,
	// an else) that a branch from before the current region can reach;
	// other join points begin one once the current region holds
	// splitCost instructions, so that a charge stands for a bounded
	// stretch of code rather than a whole loop body (Go's functions are
	// one loop around a br_table dispatch, entered again at every jump).
	//
	// The pass also follows the ways into every point (nodes), for the
	// tests, and counts the scratch locals the second pass needs.
	m.reset()
	cur := m.begin(start, none, false)
	m.nodes[m.flow].fresh = true // the way out of the entry comes from the entry
	m.push(false, 0)
	entryTests := false
	// begin begins a region at r.i, entered by ways.
	begin := func(ways int32, test bool) {
		cur = m.begin(r.i, ways, test)
	}
	// split begins a region if must or the current region is long
	// enough, and tells whether it did.
	split := func(must bool, ways int32) bool {
		if must || m.regions[cur].cost >= splitCost {
			begin(ways, false)
			return true
		}
		return false
	}
	for len(m.frames) > 0 {
		at := r.i
		op, err := skipInstr(&r)
		if err != nil {
			return nil, fmt.Errorf("at byte %d: %w", at, err)
		}
		m.regions[cur].cost++
		if err := fc.names(code, at, op, locals); err != nil {
			return nil, fmt.Errorf("at byte %d: %w", at, err)
		}
		switch op {
		case opBlock:
			m.push(false, cur)
		case opIf:
			f := m.push(false, cur)
			f.atIf, f.isIf = m.flow, true
		case opLoop:
			m.push(true, cur)
			begin(m.flow, true)
		case opElse:
			// The else branch is entered from the if; the then branch
			// goes on at the end.
			f := m.top()
			m.addWay(f, m.flow)
			f.isIf = false
			if !split(cur != f.opened, f.atIf) {
				m.flow = f.atIf
			}
		case opEnd:
			f := m.pop()
			switch {
			case len(m.frames) == 0: // the function's end
			case f.loop:
				// After a loop, only its own body falls through: the
				// region that entered the loop goes on, for the cost.
				cur = f.opened
				split(false, m.flow)
			default:
				// A branch out of the block lands here, from anywhere
				// in it since it opened.
				ways := m.join(f, m.flow)
				if !split(cur != f.opened, ways) {
					m.flow = ways
				}
			}
		case opBr, opBrIf:
			l, _ := (&reader{b: code, i: at + 1}).u32()
			if err := m.branch(l, m.flow); err != nil {
				return nil, fmt.Errorf("at byte %d: %w", at, err)
			}
			if op == opBr {
				m.flow = none
			}
		case opBrTable:
			lr := reader{b: code, i: at + 1}
			k, _ := lr.u32()
			for range uint64(k) + 1 {
				l, _ := lr.u32()
				if err := m.branch(l, m.flow); err != nil {
					return nil, fmt.Errorf("at byte %d: %w", at, err)
				}
			}
			m.flow = none
		case opUnreachable, opReturn:
			m.flow = none
		case opMemoryGrow:
			m.need(valI32, 2)
		case opPrefixFC:
			switch sub := fcSub(code, at); {
			case sub == fcTableGrow:
				m.need(valI32, 2)
			case bulk(sub):
				m.need(valI32, 1)
			}
		case opRefFunc:
			idx, _ := (&reader{b: code, i: at + 1}).u32() // read once already
			if err := fc.referable(idx); err != nil {
				return nil, fmt.Errorf("at byte %d: %w", at, err)
			}
		case opCall, opCallIndirect, opReturnCall, opReturnCallIndirect:
			if callee, ok := fc.importCalled(code, at, op); ok {
				// A host function is not metered and does not call the
				// module back: the ways go on, and the call costs what
				// the import's rule says.
				m.regions[cur].cost += callee.rule.Base
				if len(callee.rule.Args) > 0 {
					m.needCall(fc.types[callee.typ].params)
				}
				if op == opReturnCall {
					m.flow = none
				}
				break
			}
			entryTests = entryTests || m.fresh(m.flow)
			switch {
			case op == opCall || op == opCallIndirect:
				m.flow = settled // the test after it
			default:
				m.flow = none
			}
		}
	}
	if r.i != len(code) {
		return nil, errors.New("bytes after the function's end")
	}
	m.regions[0].test = entryTests
	m.decideTests()

	// Second pass: the locals with the scratch ones added, the
	// instructions, each region's charge at its place, the run-time
	// charges, a test after each call, the function indices moved.
	if locals+uint64(m.scratchLocals()) > maxLocals {
		return nil, fmt.Errorf("%d locals, more than %d", locals+uint64(m.scratchLocals()), maxLocals)
	}
	dst = m.appendLocals(dst, n, code[groups:start], uint32(locals))
	next := 0
	for r.i = start; r.i < len(code); {
		at := r.i
		for next < len(m.regions) && m.regions[next].at == at {
			dst = appendCharge(dst, fc.g, max(m.regions[next].cost, 1), m.regions[next].test, fc.check)
			next++
		}
		op, _ := skipInstr(&r) // read once already
		ins := code[at:r.i]
		switch op {
		case opMemoryGrow:
			dst = m.appendGrow(dst, ins, fc, true)
			continue
		case opPrefixFC:
			switch sub := fcSub(code, at); {
			case sub == fcTableGrow:
				dst = m.appendGrow(dst, ins, fc, false)
				continue
			case bulk(sub):
				dst = m.appendBulk(dst, sub, fc)
			}
		case opCall, opReturnCall:
			if callee, ok := fc.importCalled(code, at, op); ok {
				dst = m.appendImportCharge(dst, callee, fc)
			}
		}
		dst = copyInstr(dst, ins, op, fc.sh)
		if op == opCall && !fc.isImport(code, at) || op == opCallIndirect {
			dst = appendTest(dst, fc.g, fc.check)
		}
	}
	return dst, nil
}

// names fails if the instruction at code[at:] names a local, global,
// function or type the original module does not have: those are what the
// rewrite adds (its scratch locals, the fuel global, the check import and
// maybe its type), so an instruction invalid as written would be valid,
// and reach the meter, once metered. wazero validates the metered module
// whole when it compiles it; the rewrite keeps every other error of the
// original (it moves function indices consistently and adds only
// instructions that leave the stack as they found it), so these checks are
// what the original's validity needs beyond. locals counts the function's
// parameters and locals.
func (fc *funcCode) names(code []byte, at int, op byte, locals uint64) error {
	r := reader{b: code, i: at + 1}
	switch op {
	case opLocalGet, opLocalSet, opLocalTee:
		idx, _ := r.u32()
		if uint64(idx) >= locals {
			return fmt.Errorf("local %d of a function of %d", idx, locals)
		}
	case opGlobalGet, opGlobalSet:
		idx, _ := r.u32()
		return fc.global(idx)
	case opCall, opReturnCall:
		idx, _ := r.u32()
		return fc.function(idx)
	case opRefFunc:
		idx, _ := r.u32()
		if err := fc.function(idx); err != nil {
			return err
		}
		if !fc.declared[idx] {
			// Undeclared: invalid, and the start function's export would
			// declare it once metered.
			return fmt.Errorf("ref.func %d of a function the module declares no reference of", idx)
		}
	case opCallIndirect, opReturnCallIndirect:
		typ, _ := r.u32()
		return fc.typeIndex(int64(typ))
	case opBlock, opLoop, opIf:
		if idx, ok := r.blockTypeIndex(); ok {
			return fc.typeIndex(idx)
		}
	}
	return nil
}

// blockTypeIndex reads a block type; ok when it is a type index.
func (r *reader) blockTypeIndex() (int64, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	switch r.b[r.i] {
	case 0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		return 0, false
	}
	var v int64
	var shift uint
	for n := 0; n < 5 && r.i < len(r.b); n++ {
		c := r.b[r.i]
		r.i++
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << shift // negative: a value type, not an index
			}
			return v, v >= 0
		}
	}
	return 0, false
}

// isImport reports whether the call at code[at:] calls an imported
// function: those come before the check import, the defined ones after.
func (fc *funcCode) isImport(code []byte, at int) bool {
	idx, _ := (&reader{b: code, i: at + 1}).u32() // read once already
	return idx < fc.check
}

// importCalled returns the import a call or return_call at code[at:]
// calls, if it calls one.
func (fc *funcCode) importCalled(code []byte, at int, op byte) (*funcImport, bool) {
	if op != opCall && op != opReturnCall {
		return nil, false
	}
	idx, _ := (&reader{b: code, i: at + 1}).u32() // read once already
	if idx >= fc.check {
		return nil, false
	}
	return &fc.funcs[idx], true
}

// scratch is the state of meterBody's first pass, kept from one body to
// the next.
type scratch struct {
	regions []region
	nodes   []node
	kids    []int32 // the kids of the join nodes
	flow    int32   // the ways into the current point: a node, or none
	frames  []frame

	pools      [len(poolTypes)]uint32 // the scratch locals needed, per type
	localsBase uint32                 // the index of the first scratch local
	slots      []uint32
}

// frame is an open block, if or loop.
type frame struct {
	loop   bool
	isIf   bool    // an if whose else has not come
	opened int     // the current region when the frame opened
	ways   []int32 // the nodes of the branches to its end, and the fall through an else
	atIf   int32   // an if's ways in
}

func (m *scratch) reset() {
	m.regions, m.nodes, m.kids, m.frames = m.regions[:0], m.nodes[:0], m.kids[:0], m.frames[:0]
	m.nodes = append(m.nodes, node{region: noRegion}) // settled
	m.flow = none
	m.pools = [len(poolTypes)]uint32{}
}

// begin begins a region at the offset at, entered by the node ways (or
// none), its charge a test or not; the ways out of it go on from it. It
// returns the region.
func (m *scratch) begin(at int, ways int32, test bool) int {
	m.regions = append(m.regions, region{at: at, in: ways, test: test})
	rg := len(m.regions) - 1
	m.nodes = append(m.nodes, node{region: int32(rg), fresh: m.fresh(ways) && !test})
	m.flow = int32(len(m.nodes) - 1)
	return rg
}

// fresh reports whether the ways n may come from the function's entry
// through no test.
func (m *scratch) fresh(n int32) bool { return n != none && m.nodes[n].fresh }

// addWay adds the ways n to the branches to f's end.
func (m *scratch) addWay(f *frame, n int32) {
	if n != none && (len(f.ways) == 0 || f.ways[len(f.ways)-1] != n) {
		f.ways = append(f.ways, n)
	}
}

// join returns the ways into the end of the frame f, which the flow n
// falls into: the branches to it, n, and an if's ways in when it had no
// else (the if goes on at its end when false).
func (m *scratch) join(f frame, n int32) int32 {
	m.addWay(&f, n)
	if f.isIf {
		m.addWay(&f, f.atIf)
	}
	switch len(f.ways) {
	case 0:
		return none
	case 1:
		return f.ways[0]
	}
	j := node{region: noRegion, kids: int32(len(m.kids)), nkids: int32(len(f.ways))}
	for _, k := range f.ways {
		j.fresh = j.fresh || m.nodes[k].fresh
	}
	m.kids = append(m.kids, f.ways...)
	m.nodes = append(m.nodes, j)
	return int32(len(m.nodes) - 1)
}

// decideTests decides which of the regions' charges test beyond those
// decided already (a loop's header, the entry): those whose ways in bring
// more than creditLimit of charges since the last test, with their own
// cost. A node's kids and a region's ways in are older than the node of
// the way out of it, so one pass over the nodes in order does.
func (m *scratch) decideTests() {
	for i := range m.nodes {
		nd := &m.nodes[i]
		switch {
		case i == settled:
			nd.credit = 0
		case nd.region != noRegion:
			rg := &m.regions[nd.region]
			if !rg.test {
				credit := max(rg.cost, 1)
				if rg.in != none {
					credit += m.nodes[rg.in].credit
				}
				if credit > creditLimit {
					rg.test, credit = true, 0
				}
				rg.credit = credit
			}
			nd.credit = rg.credit
		default:
			nd.credit = 0
			for _, k := range m.kids[nd.kids : nd.kids+nd.nkids] {
				nd.credit = max(nd.credit, m.nodes[k].credit)
			}
		}
	}
}

func (m *scratch) push(loop bool, opened int) *frame {
	if len(m.frames) < cap(m.frames) {
		m.frames = m.frames[:len(m.frames)+1]
	} else {
		m.frames = append(m.frames, frame{})
	}
	f := &m.frames[len(m.frames)-1]
	f.loop, f.isIf, f.opened = loop, false, opened
	f.ways, f.atIf = f.ways[:0], none
	return f
}

func (m *scratch) top() *frame { return &m.frames[len(m.frames)-1] }

// pop closes the innermost frame; what it returns holds until the next
// push.
func (m *scratch) pop() frame {
	f := m.frames[len(m.frames)-1]
	m.frames = m.frames[:len(m.frames)-1]
	return f
}

// branch records the ways of a branch to the label l: the end of a block
// or an if. A branch to a loop goes to its header, which tests; one to the
// function's own label returns.
func (m *scratch) branch(l uint32, ways int32) error {
	if uint64(l) >= uint64(len(m.frames)) {
		return fmt.Errorf("a branch to label %d of %d", l, len(m.frames))
	}
	i := len(m.frames) - 1 - int(l)
	if i == 0 || m.frames[i].loop {
		return nil
	}
	m.addWay(&m.frames[i], ways)
	return nil
}

// appendCharge appends: fuel -= cost; and when test, if fuel < 0 {
// check(0) }.
func appendCharge(b []byte, g uint32, cost int64, test bool, check uint32) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const)
	b = appendS64(b, cost)
	b = append(b, opI64Sub, opGlobalSet)
	b = appendU32(b, g)
	if !test {
		return b
	}
	return appendTest(b, g, check)
}

// appendTest appends: if fuel < 0 { check(0) }.
func appendTest(b []byte, g, check uint32) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const, 0x00, opI64LtS, opIf, 0x40, opI32Const, 0x00, opCall)
	b = appendU32(b, check)
	return append(b, opEnd)
}

// appendBulk appends, before the 0xFC instruction sub, whose length is on
// the top of the stack (and stays there): fuel -= length in units (16
// bytes of memory, an element of a table); if fuel < 0 { check(0) }. So
// an instruction that would pass the call's fuel fails before it runs.
func (m *scratch) appendBulk(b []byte, sub uint32, fc *funcCode) []byte {
	n := m.local(valI32, 0)
	b = append(b, opLocalTee)
	b = appendU32(b, n)
	b = append(b, opGlobalGet)
	b = appendU32(b, fc.g)
	b = append(b, opLocalGet)
	b = appendU32(b, n)
	b = append(b, opI64ExtendI32U)
	switch sub {
	case fcMemoryInit, fcMemoryCopy, fcMemoryFill:
		b = append(b, opI64Const, memoryShift, opI64ShrU)
	}
	b = append(b, opI64Sub, opGlobalSet)
	b = appendU32(b, fc.g)
	return appendTest(b, fc.g, fc.check)
}

// appendGrow appends the grow instruction ins (memory.grow, or table.grow
// when not memory), its delta on the top of the stack, charged after it
// succeeds for what the memory or table then holds (a grow may copy it
// all): fuel -= (old size + delta) in units; then the test. A grow that
// fails (it returns -1) did no work and is charged nothing more.
func (m *scratch) appendGrow(b, ins []byte, fc *funcCode, memory bool) []byte {
	delta, old := m.local(valI32, 0), m.local(valI32, 1)
	b = append(b, opLocalTee)
	b = appendU32(b, delta)
	b = append(b, ins...)
	b = append(b, opLocalSet)
	b = appendU32(b, old)
	b = append(b, opLocalGet)
	b = appendU32(b, old)
	b = append(b, opI32Const, 0x7F, opI32Ne, opIf, 0x40, opGlobalGet) // i32.const -1
	b = appendU32(b, fc.g)
	b = append(b, opLocalGet)
	b = appendU32(b, old)
	b = append(b, opI64ExtendI32U, opLocalGet)
	b = appendU32(b, delta)
	b = append(b, opI64ExtendI32U, opI64Add)
	if memory {
		b = append(b, opI64Const, 16-memoryShift, opI64Shl)
	}
	b = append(b, opI64Sub, opGlobalSet)
	b = appendU32(b, fc.g)
	b = append(b, opEnd)
	b = appendTest(b, fc.g, fc.check)
	b = append(b, opLocalGet) // the grow's result
	return appendU32(b, old)
}

// appendImportCharge appends what comes before a call of the import f:
// for a rule with Args, the arguments saved in scratch locals, the charge
// of them and a test, and the arguments put back; for a gated one, the
// gate's call of the check import.
func (m *scratch) appendImportCharge(b []byte, f *funcImport, fc *funcCode) []byte {
	if len(f.rule.Args) > 0 {
		params := fc.types[f.typ].params
		slots := m.slots[:0]
		seen := [len(poolTypes)]uint32{}
		for _, t := range params {
			slots = append(slots, m.local(t, seen[poolIndex(t)]))
			seen[poolIndex(t)]++
		}
		m.slots = slots
		for i := len(slots) - 1; i >= 0; i-- {
			b = append(b, opLocalSet)
			b = appendU32(b, slots[i])
		}
		b = append(b, opGlobalGet)
		b = appendU32(b, fc.g)
		for _, a := range f.rule.Args {
			b = append(b, opLocalGet)
			b = appendU32(b, slots[a.Param])
			b = append(b, opI64ExtendI32U)
			if a.Per > 1 {
				b = append(b, opI64Const)
				b = appendS64(b, a.Per)
				b = append(b, opI64Mul)
			}
			if a.Shift > 0 {
				b = append(b, opI64Const, a.Shift, opI64ShrU)
			}
			b = append(b, opI64Sub)
		}
		b = append(b, opGlobalSet)
		b = appendU32(b, fc.g)
		b = appendTest(b, fc.g, fc.check)
		for _, slot := range slots {
			b = append(b, opLocalGet)
			b = appendU32(b, slot)
		}
	}
	if f.rule.Gate > 0 {
		b = append(b, opI32Const)
		b = appendS64(b, int64(f.rule.Gate)) // i32.const is a signed LEB128 too
		b = append(b, opCall)
		b = appendU32(b, fc.check)
	}
	return b
}

// poolTypes are the types of scratch locals, in the order they are added
// after a function's own locals.
var poolTypes = [...]byte{valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref}

func poolIndex(t byte) int {
	for i, p := range poolTypes {
		if p == t {
			return i
		}
	}
	return -1
}

// need notes that a site needs k scratch locals of type t.
func (m *scratch) need(t byte, k uint32) {
	if i := poolIndex(t); i >= 0 {
		m.pools[i] = max(m.pools[i], k)
	}
}

// needCall notes the scratch locals a call with params needs: one per
// parameter.
func (m *scratch) needCall(params []byte) {
	var counts [len(poolTypes)]uint32
	for _, t := range params {
		if i := poolIndex(t); i >= 0 {
			counts[i]++
		}
	}
	for i, k := range counts {
		m.pools[i] = max(m.pools[i], k)
	}
}

// scratchLocals is how many scratch locals the function needs.
func (m *scratch) scratchLocals() uint32 {
	var n uint32
	for _, k := range m.pools {
		n += k
	}
	return n
}

// local returns the index of the k-th scratch local of type t.
func (m *scratch) local(t byte, k uint32) uint32 {
	idx := m.localsBase
	for i, p := range poolTypes {
		if p == t {
			return idx + k
		}
		idx += m.pools[i]
	}
	panic("fuel: a scratch local of an unknown type") // types come from a validated module
}

// appendLocals appends the function's locals: its own n groups (the bytes
// groups), then one group per type of scratch local it needs; locals is
// the index of the first scratch local.
func (m *scratch) appendLocals(b []byte, n uint32, groups []byte, locals uint32) []byte {
	m.localsBase = locals
	for _, k := range m.pools {
		if k > 0 {
			n++
		}
	}
	b = appendU32(b, n)
	b = append(b, groups...)
	for i, k := range m.pools {
		if k > 0 {
			b = appendU32(b, k)
			b = append(b, poolTypes[i])
		}
	}
	return b
}

// skipInstr reads one instruction and its immediates, and returns its
// opcode (for the prefixed ones, the prefix).
func skipInstr(r *reader) (byte, error) {
	op, err := r.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0B, op == 0x0F, op == 0x1A, op == 0x1B, op == 0xD1,
		op >= 0x45 && op <= 0xC4:
		// unreachable, nop, else, end, return, drop, select,
		// ref.is_null, the numeric instructions: no immediates.
		return op, nil
	case op == opBlock, op == opLoop, op == opIf:
		return op, r.blockType()
	case op == 0x0C, op == 0x0D, // br, br_if
		op == 0x10,               // call
		op == 0x12,               // return_call
		op >= 0x20 && op <= 0x26, // local.*, global.*, table.get/set
		op == 0xD2:               // ref.func
		_, err := r.u32()
		return op, err
	case op == 0x0E: // br_table: a vector of labels, then the default
		n, err := r.u32()
		if err != nil {
			return op, err
		}
		for range uint64(n) + 1 {
			if _, err := r.u32(); err != nil {
				return op, err
			}
		}
		return op, nil
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect: type, table
		if _, err := r.u32(); err != nil {
			return op, err
		}
		_, err := r.u32()
		return op, err
	case op == 0x1C: // select with types: a vector of value types
		n, err := r.u32()
		if err != nil {
			return op, err
		}
		for range n {
			v, err := r.byte()
			if err != nil {
				return op, err
			}
			if err := valType(v); err != nil {
				return op, err
			}
		}
		return op, nil
	case op >= 0x28 && op <= 0x3E: // loads and stores
		return op, r.memarg()
	case op == 0x3F, op == 0x40: // memory.size, memory.grow: a memory index
		_, err := r.u32()
		return op, err
	case op == 0x41: // i32.const
		return op, r.skipLEB(5)
	case op == 0x42: // i64.const
		return op, r.skipLEB(10)
	case op == 0x43: // f32.const
		return op, r.skip(4)
	case op == 0x44: // f64.const
		return op, r.skip(8)
	case op == 0xD0: // ref.null: a heap type, funcref or externref
		t, err := r.byte()
		if err == nil && t != valFuncref && t != valExternref {
			err = fmt.Errorf("ref.null of heap type %#x, which the meter does not know", t)
		}
		return op, err
	case op == 0xFC:
		return op, r.prefixFC()
	case op == 0xFD:
		return op, r.prefixFD()
	case op == 0xFE:
		return op, r.prefixFE()
	}
	return op, fmt.Errorf("opcode %#x, which the meter does not know", op)
}

// blockType skips a block type: empty, a value type, or a type index (a
// signed LEB128 of 33 bits).
func (r *reader) blockType() error {
	if r.i >= len(r.b) {
		return errShort
	}
	switch r.b[r.i] {
	case 0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		r.i++
		return nil
	}
	if r.b[r.i]&0x40 != 0 && r.b[r.i]&0x80 == 0 {
		// A negative one-byte index is a value type this decoder does
		// not know (the GC proposal's).
		return fmt.Errorf("block type %#x", r.b[r.i])
	}
	return r.skipLEB(5)
}

// memarg skips a memory argument: alignment (its bit 6 says a memory
// index follows), then offset.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return r.skipLEB(10)
}

// prefixFC skips the 0xFC instructions: saturating truncations, bulk
// memory and tables.
func (r *reader) prefixFC() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // trunc_sat
		return nil
	case sub == 8: // memory.init: data, memory
		return r.u32s(2)
	case sub == 9, sub == 11, sub == 13, sub == 15, sub == 16, sub == 17:
		// data.drop, memory.fill, elem.drop, table.grow, table.size,
		// table.fill: one index
		return r.u32s(1)
	case sub == 10, sub == 12, sub == 14: // memory.copy, table.init, table.copy: two
		return r.u32s(2)
	}
	return fmt.Errorf("instruction 0xfc %d, which the meter does not know", sub)
}

// prefixFD skips the SIMD instructions.
func (r *reader) prefixFD() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // loads and stores
		return r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		return r.skip(1)
	case sub >= 84 && sub <= 91: // load_lane, store_lane
		if err := r.memarg(); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 0x113:
		return nil
	}
	return fmt.Errorf("instruction 0xfd %d, which the meter does not know", sub)
}

// prefixFE skips the atomic instructions (threads).
func (r *reader) prefixFE() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub == 0x03: // atomic.fence
		return r.skip(1)
	case sub <= 0x4E:
		return r.memarg()
	}
	return fmt.Errorf("instruction 0xfe %d, which the meter does not know", sub)
}

func (r *reader) u32s(n int) error {
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}
