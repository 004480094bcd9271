package fuel

import (
	"errors"
	"fmt"
)

// splitCost is the cost past which a region ends at the next join point.
const splitCost = 32

// Opcodes the rewrite reads or writes.
const (
	opBlock      = 0x02
	opLoop       = 0x03
	opIf         = 0x04
	opElse       = 0x05
	opEnd        = 0x0B
	opCall       = 0x10
	opReturnCall = 0x12
	opRefFunc    = 0xD2
	opGlobalGet  = 0x23
	opGlobalSet  = 0x24
	opI64Const   = 0x42
	opI64LtS     = 0x53
	opI64Sub     = 0x7D
)

// meterCode returns the code section with a charge at each function's
// entry and each loop's header, on the global g, calling the function
// refill when it runs out; the indices of the functions called move as sh
// says.
func meterCode(sec []byte, g, refill uint32, sh shift) ([]byte, error) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(sec)+len(sec)/8), n)
	var body []byte
	var regions []region
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
		body, regions, err = meterBody(body[:0], regions[:0], code, g, refill, sh)
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
	at   int   // where its charge goes: an offset into the body
	cost int64 // its instructions
}

// meterBody appends the metered form of a function body (its locals, then
// its code) to dst. regions is scratch space.
func meterBody(dst []byte, regions []region, code []byte, g, refill uint32, sh shift) ([]byte, []region, error) {
	r := reader{b: code}
	// The locals: a vector of (count, type).
	n, err := r.u32()
	if err != nil {
		return nil, regions, err
	}
	for range n {
		if err := r.skipLEB(5); err != nil {
			return nil, regions, err
		}
		if _, err := r.byte(); err != nil {
			return nil, regions, err
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
	regions = append(regions, region{at: start})
	cur := 0
	type frame struct {
		loop   bool
		opened int // the current region when the frame opened
	}
	stack := []frame{{opened: 0}}
	split := func(must bool) {
		if must || regions[cur].cost >= splitCost {
			regions = append(regions, region{at: r.i})
			cur = len(regions) - 1
		}
	}
	for len(stack) > 0 {
		at := r.i
		op, err := skipInstr(&r)
		if err != nil {
			return nil, regions, fmt.Errorf("at byte %d: %w", at, err)
		}
		regions[cur].cost++
		switch op {
		case opBlock, opIf:
			stack = append(stack, frame{opened: cur})
		case opLoop:
			stack = append(stack, frame{loop: true, opened: cur})
			regions = append(regions, region{at: r.i})
			cur = len(regions) - 1
		case opElse:
			// The else branch is entered from the if.
			split(cur != stack[len(stack)-1].opened)
		case opEnd:
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			switch {
			case len(stack) == 0: // the function's end
			case f.loop:
				// After a loop, only its own body falls through: the
				// region that entered the loop goes on.
				cur = f.opened
				split(false)
			default:
				// A branch out of the block lands here, from anywhere
				// in it since it opened.
				split(cur != f.opened)
			}
		}
	}
	if r.i != len(code) {
		return nil, regions, errors.New("bytes after the function's end")
	}

	// Second pass: the instructions, each region's charge at its place,
	// the function indices moved.
	dst = append(dst, code[:start]...)
	next := 0
	for r.i = start; r.i < len(code); {
		at := r.i
		for next < len(regions) && regions[next].at == at {
			dst = appendCharge(dst, g, max(regions[next].cost, 1), refill)
			next++
		}
		op, _ := skipInstr(&r) // read once already
		dst = copyInstr(dst, code[at:r.i], op, sh)
	}
	return dst, regions, nil
}

// appendCharge appends: fuel -= cost; if fuel < 0 { refill() }.
func appendCharge(b []byte, g uint32, cost int64, refill uint32) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const)
	b = appendS64(b, cost)
	b = append(b, opI64Sub, opGlobalSet)
	b = appendU32(b, g)
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
