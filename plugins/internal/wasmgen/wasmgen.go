// Package wasmgen assembles small WebAssembly modules for tests: the
// hostile modules of the sandbox's tests and the fuzzer's generated ones.
// It writes what it is told, valid or not: a test of the validation needs
// modules that are invalid on purpose.
package wasmgen

// Value types.
const (
	I32       = 0x7F
	I64       = 0x7E
	F32       = 0x7D
	F64       = 0x7C
	Funcref   = 0x70
	Externref = 0x6F
)

// Type is a function type.
type Type struct{ Params, Results []byte }

// Import is an imported function, table, memory or global.
type Import struct {
	Module, Name string
	Kind         byte   // 0 function, 1 table, 2 memory, 3 global
	Type         uint32 // a function's type index
	Desc         []byte // a table's, memory's or global's description, encoded
}

// Func is a defined function: its type, its locals as (count, type)
// groups, and its code without the final end.
type Func struct {
	Type   uint32
	Locals []Local
	Code   []byte
}

// Local is a group of locals of one type.
type Local struct {
	Count uint32
	Type  byte
}

// Table is a defined table of funcref.
type Table struct {
	Min    uint32
	Max    uint32
	HasMax bool
}

// Memory is the module's memory, in pages.
type Memory struct {
	Min    uint32
	Max    uint32
	HasMax bool
}

// Global is a defined global: its type, mutability and its initial value
// as a constant expression without the final end.
type Global struct {
	Type    byte
	Mutable bool
	Init    []byte
}

// Export is an export: kind 0 function, 1 table, 2 memory, 3 global.
type Export struct {
	Name  string
	Kind  byte
	Index uint32
}

// Elem is an active element segment of table 0 at a constant offset.
type Elem struct {
	Offset uint32
	Funcs  []uint32
}

// Data is an active data segment of memory 0 at a constant offset.
type Data struct {
	Offset uint32
	Bytes  []byte
}

// Module is a module to assemble.
type Module struct {
	Types   []Type
	Imports []Import
	Funcs   []Func
	Tables  []Table
	Memory  *Memory
	Globals []Global
	Exports []Export
	Start   *uint32
	Elems   []Elem
	Data    []Data
}

// Encode assembles the module.
func (m Module) Encode() []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	if len(m.Types) > 0 {
		s := ULEB(nil, uint64(len(m.Types)))
		for _, t := range m.Types {
			s = append(s, 0x60)
			s = ULEB(s, uint64(len(t.Params)))
			s = append(s, t.Params...)
			s = ULEB(s, uint64(len(t.Results)))
			s = append(s, t.Results...)
		}
		b = Section(b, 1, s)
	}
	if len(m.Imports) > 0 {
		s := ULEB(nil, uint64(len(m.Imports)))
		for _, im := range m.Imports {
			s = Name(s, im.Module)
			s = Name(s, im.Name)
			s = append(s, im.Kind)
			if im.Kind == 0 {
				s = ULEB(s, uint64(im.Type))
			} else {
				s = append(s, im.Desc...)
			}
		}
		b = Section(b, 2, s)
	}
	if len(m.Funcs) > 0 {
		s := ULEB(nil, uint64(len(m.Funcs)))
		for _, f := range m.Funcs {
			s = ULEB(s, uint64(f.Type))
		}
		b = Section(b, 3, s)
	}
	if len(m.Tables) > 0 {
		s := ULEB(nil, uint64(len(m.Tables)))
		for _, t := range m.Tables {
			s = append(s, Funcref)
			s = limits(s, t.Min, t.Max, t.HasMax)
		}
		b = Section(b, 4, s)
	}
	if m.Memory != nil {
		b = Section(b, 5, limits([]byte{1}, m.Memory.Min, m.Memory.Max, m.Memory.HasMax))
	}
	if len(m.Globals) > 0 {
		s := ULEB(nil, uint64(len(m.Globals)))
		for _, g := range m.Globals {
			s = append(s, g.Type)
			if g.Mutable {
				s = append(s, 1)
			} else {
				s = append(s, 0)
			}
			s = append(s, g.Init...)
			s = append(s, 0x0B)
		}
		b = Section(b, 6, s)
	}
	if len(m.Exports) > 0 {
		s := ULEB(nil, uint64(len(m.Exports)))
		for _, e := range m.Exports {
			s = Name(s, e.Name)
			s = append(s, e.Kind)
			s = ULEB(s, uint64(e.Index))
		}
		b = Section(b, 7, s)
	}
	if m.Start != nil {
		b = Section(b, 8, ULEB(nil, uint64(*m.Start)))
	}
	if len(m.Elems) > 0 {
		s := ULEB(nil, uint64(len(m.Elems)))
		for _, e := range m.Elems {
			s = append(s, 0x00, 0x41)
			s = SLEB(s, int64(int32(e.Offset)))
			s = append(s, 0x0B)
			s = ULEB(s, uint64(len(e.Funcs)))
			for _, f := range e.Funcs {
				s = ULEB(s, uint64(f))
			}
		}
		b = Section(b, 9, s)
	}
	if len(m.Funcs) > 0 {
		s := ULEB(nil, uint64(len(m.Funcs)))
		for _, f := range m.Funcs {
			body := ULEB(nil, uint64(len(f.Locals)))
			for _, l := range f.Locals {
				body = ULEB(body, uint64(l.Count))
				body = append(body, l.Type)
			}
			body = append(body, f.Code...)
			body = append(body, 0x0B)
			s = ULEB(s, uint64(len(body)))
			s = append(s, body...)
		}
		b = Section(b, 10, s)
	}
	if len(m.Data) > 0 {
		s := ULEB(nil, uint64(len(m.Data)))
		for _, d := range m.Data {
			s = append(s, 0x00, 0x41)
			s = SLEB(s, int64(int32(d.Offset)))
			s = append(s, 0x0B)
			s = ULEB(s, uint64(len(d.Bytes)))
			s = append(s, d.Bytes...)
		}
		b = Section(b, 11, s)
	}
	return b
}

func limits(b []byte, min, max uint32, hasMax bool) []byte {
	if hasMax {
		b = append(b, 0x01)
		b = ULEB(b, uint64(min))
		return ULEB(b, uint64(max))
	}
	b = append(b, 0x00)
	return ULEB(b, uint64(min))
}

// Section appends a section of id with body to b.
func Section(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = ULEB(b, uint64(len(body)))
	return append(b, body...)
}

// Name appends a name: its length, then its bytes.
func Name(b []byte, s string) []byte {
	b = ULEB(b, uint64(len(s)))
	return append(b, s...)
}

// ULEB appends v as an unsigned LEB128.
func ULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// SLEB appends v as a signed LEB128.
func SLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// Instructions, as code to append to.
const (
	Unreachable = 0x00
	Nop         = 0x01
	Block       = 0x02
	Loop        = 0x03
	If          = 0x04
	Else        = 0x05
	End         = 0x0B
	Br          = 0x0C
	BrIf        = 0x0D
	Return      = 0x0F
	Call        = 0x10
	CallInd     = 0x11
	Drop        = 0x1A
	LocalGet    = 0x20
	LocalSet    = 0x21
	LocalTee    = 0x22
	GlobalGet   = 0x23
	GlobalSet   = 0x24
	I32Load     = 0x28
	I32Store    = 0x36
	MemorySize  = 0x3F
	MemoryGrow  = 0x40
	I32Const    = 0x41
	I64Const    = 0x42
	I32Eqz      = 0x45
	I32Add      = 0x6A
	I32Sub      = 0x6B
	I64Add      = 0x7C
	Void        = 0x40 // the empty block type
	RefFunc     = 0xD2
	PrefixFC    = 0xFC
)

// I32c appends i32.const v.
func I32c(b []byte, v int32) []byte { return SLEB(append(b, I32Const), int64(v)) }

// MemoryFill appends memory.fill (d, val, n on the stack).
func MemoryFill(b []byte) []byte { return append(b, PrefixFC, 11, 0x00) }

// MemoryCopy appends memory.copy (d, s, n on the stack).
func MemoryCopy(b []byte) []byte { return append(b, PrefixFC, 10, 0x00, 0x00) }

// TableGrow appends table.grow of table 0 (ref, n on the stack).
func TableGrow(b []byte) []byte { return append(b, PrefixFC, 15, 0x00) }

// TableFill appends table.fill of table 0 (i, ref, n on the stack).
func TableFill(b []byte) []byte { return append(b, PrefixFC, 17, 0x00) }

// RefNull appends ref.null funcref.
func RefNull(b []byte) []byte { return append(b, 0xD0, Funcref) }

// Forever appends a loop that never ends around body: loop; body; br 0;
// end.
func Forever(b []byte, body ...byte) []byte {
	b = append(b, Loop, Void)
	b = append(b, body...)
	return append(b, Br, 0x00, End)
}

// ExportFunc is an export of the function idx.
func ExportFunc(name string, idx uint32) Export { return Export{Name: name, Kind: 0, Index: idx} }

// ExportGlobal is an export of the global idx.
func ExportGlobal(name string, idx uint32) Export { return Export{Name: name, Kind: 3, Index: idx} }
