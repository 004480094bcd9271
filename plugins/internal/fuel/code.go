package fuel

import (
	"errors"
	"fmt"
)

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
)

// meterCode returns the code section with the charges and tests of every
// function body (see meterBody), on the global g, calling the function
// refill when the fuel runs out; the indices of the functions called move
// as sh says.
func meterCode(sec []byte, g, refill uint32, sh shift) ([]byte, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(sec)+len(sec)/8), n)
	var body []byte
	var m scratch
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
		body, err = meterBody(body[:0], &m, code, g, refill, sh)
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
// below zero, calls refill, where the host gives more fuel or ends the
// call. Tests are what costs (the call they may make keeps compiled code
// from holding values in registers across them), so only some charges
// test, and a test follows every call:
//
//   - the charge at a loop's header, so that every turn of a loop tests;
//   - the charge at the function's entry when a call can come before any
//     loop's header, so that a recursion tests at every level;
//   - a test right after every call of a function of the module (call and
//     call_indirect), so that a guest returns from a call settled, however
//     deep its stack unwinds.
//
// A call of an imported function counts for none of these: a host
// function is not metered, and the host's do not call the module back.
//   - the charge of a region whose charges since the last test, on any way
//     in, would cost more than creditLimit.
//
// So between two tests a guest runs the charges of at most about
// creditLimit instructions in a function, and as many in a function it
// calls before that one's first test (which comes before any call of its
// own, or is the test after the call): it reaches refill within a few
// thousand instructions of running out. What it is charged does not
// depend on the tests.
func meterBody(dst []byte, m *scratch, code []byte, g, refill uint32, sh shift) ([]byte, error) {
	r := reader{b: code}
	// The locals: a vector of (count, type).
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	for range n {
		if err := r.skipLEB(5); err != nil {
			return nil, err
		}
		if _, err := r.byte(); err != nil {
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
	// tests.
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
		case opCall, opCallIndirect, opReturnCall, opReturnCallIndirect:
			if op == opCall && imported(code, at, refill) {
				// A host function is not metered and does not call the
				// module back: the ways go on.
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

	// Second pass: the instructions, each region's charge at its place, a
	// test after each call, the function indices moved.
	dst = append(dst, code[:start]...)
	next := 0
	for r.i = start; r.i < len(code); {
		at := r.i
		for next < len(m.regions) && m.regions[next].at == at {
			dst = appendCharge(dst, g, max(m.regions[next].cost, 1), m.regions[next].test, refill)
			next++
		}
		op, _ := skipInstr(&r) // read once already
		dst = copyInstr(dst, code[at:r.i], op, sh)
		if op == opCall && !imported(code, at, refill) || op == opCallIndirect {
			dst = appendTest(dst, g, refill)
		}
	}
	return dst, nil
}

// imported reports whether the call at code[at:] calls an imported
// function: those come before refill, the defined ones after.
func imported(code []byte, at int, refill uint32) bool {
	idx, _ := (&reader{b: code, i: at + 1}).u32() // read once already
	return idx < refill
}

// scratch is the state of meterBody's first pass, kept from one body to
// the next.
type scratch struct {
	regions []region
	nodes   []node
	kids    []int32 // the kids of the join nodes
	flow    int32   // the ways into the current point: a node, or none
	frames  []frame
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
// refill() }.
func appendCharge(b []byte, g uint32, cost int64, test bool, refill uint32) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const)
	b = appendS64(b, cost)
	b = append(b, opI64Sub, opGlobalSet)
	b = appendU32(b, g)
	if !test {
		return b
	}
	return appendTest(b, g, refill)
}

// appendTest appends: if fuel < 0 { refill() }.
func appendTest(b []byte, g, refill uint32) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const, 0x00, opI64LtS, opIf, 0x40, opCall)
	b = appendU32(b, refill)
	return append(b, opEnd)
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
		return op, r.skip(int(n))
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
	case op == 0xD0: // ref.null: a heap type
		_, err := r.byte()
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
