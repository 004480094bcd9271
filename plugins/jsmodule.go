package plugins

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// JavaScript plugins. A tool written in TypeScript or JavaScript is one
// module file like any plugin's: the module of a JavaScript engine
// compiled to Wasm (QuickJS-NG, the npm package quickjs-wasi, which the
// TypeScript kit depends on) with the tool's bundled script in a custom
// section, JavaScriptSection. Custom sections do not change what a module
// does, so the file is an ordinary module to every tool that reads one;
// the host runs the engine with the script (jsvm.go). The engine is the
// same bytes in every such plugin, so it is metered and compiled once and
// its machine code shared; each plugin's identity (its hash, signature,
// versions) is the whole file's.

// JavaScriptSection is the name of the custom section that holds a
// JavaScript plugin's script: UTF-8 text that defines the ABI's entry
// points (the TypeScript kit's runtime does, pdk/ts).
const JavaScriptSection = "agentic-host.js"

// MaxScriptBytes bounds a JavaScript plugin's script.
const MaxScriptBytes = 16 << 20

// JavaScriptModule returns the plugin module that runs script on engine,
// a JavaScript engine's module (quickjs-wasi's quickjs.wasm): engine with
// script appended as the custom section JavaScriptSection. It refuses an
// engine that is not a module or holds a script already, and a script that
// is empty, too long or not UTF-8.
func JavaScriptModule(engine, script []byte) ([]byte, error) {
	if _, _, ok, err := splitJavaScript(engine); err != nil {
		return nil, err
	} else if ok {
		return nil, errors.New("plugins: the engine module holds a script already")
	}
	switch {
	case len(script) == 0:
		return nil, errors.New("plugins: empty script")
	case len(script) > MaxScriptBytes:
		return nil, fmt.Errorf("plugins: script of %d bytes, the limit is %d", len(script), MaxScriptBytes)
	case !utf8.Valid(script):
		return nil, errors.New("plugins: the script is not UTF-8")
	}
	var payload []byte
	payload = binary.AppendUvarint(payload, uint64(len(JavaScriptSection)))
	payload = append(payload, JavaScriptSection...)
	payload = append(payload, script...)
	out := make([]byte, 0, len(engine)+len(payload)+6)
	out = append(out, engine...)
	out = append(out, 0) // a custom section
	out = binary.AppendUvarint(out, uint64(len(payload)))
	return append(out, payload...), nil
}

// splitJavaScript tells whether wasm is a JavaScript plugin: if it holds
// a JavaScriptSection, it returns the module without it (the engine) and
// the script. It reads only the sections' framing; the engine is validated
// where every module is (prepare). A module with two such sections, or
// whose framing is broken, is an error.
func splitJavaScript(wasm []byte) (engine, script []byte, ok bool, err error) {
	if len(wasm) < 8 || !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return wasm, nil, false, nil // not a module: prepare says so
	}
	start, end := -1, -1
	for i := 8; i < len(wasm); {
		id := wasm[i]
		size, n := binary.Uvarint(wasm[i+1:])
		body := i + 1 + n
		if n <= 0 || size > uint64(len(wasm)-body) {
			return wasm, nil, false, nil // broken framing: prepare says so
		}
		next := body + int(size)
		if id == 0 {
			nameLen, m := binary.Uvarint(wasm[body:next])
			if m > 0 && nameLen <= uint64(next-body-m) &&
				string(wasm[body+m:body+m+int(nameLen)]) == JavaScriptSection {
				if start >= 0 {
					return nil, nil, false, errors.New("it holds two JavaScript sections (" + JavaScriptSection + ")")
				}
				start, end = i, next
				script = wasm[body+m+int(nameLen) : next]
			}
		}
		i = next
	}
	if start < 0 {
		return wasm, nil, false, nil
	}
	switch {
	case len(script) == 0:
		return nil, nil, false, errors.New("its JavaScript section (" + JavaScriptSection + ") is empty")
	case len(script) > MaxScriptBytes:
		return nil, nil, false, fmt.Errorf("its script has %d bytes, the limit is %d", len(script), MaxScriptBytes)
	case !utf8.Valid(script):
		return nil, nil, false, errors.New("its script (" + JavaScriptSection + ") is not UTF-8")
	}
	engine = make([]byte, 0, len(wasm)-(end-start))
	engine = append(append(engine, wasm[:start]...), wasm[end:]...)
	return engine, script, true, nil
}

// lowestData returns the lowest address an active data segment of a
// module initialises, and false when it cannot tell (a segment placed by
// an expression other than i32.const, or framing it cannot read). An
// engine whose data all lie above its stack pointer keeps nothing but its
// stack below it (wasm-ld's --stack-first layout, quickjs-wasi's): the
// host need not put that region back between calls (jsVM.init).
func lowestData(wasm []byte) (uint32, bool) {
	if len(wasm) < 8 {
		return 0, false
	}
	low := uint64(1 << 32)
	for i := 8; i < len(wasm); {
		id := wasm[i]
		size, n := binary.Uvarint(wasm[i+1:])
		body := i + 1 + n
		if n <= 0 || size > uint64(len(wasm)-body) {
			return 0, false
		}
		next := body + int(size)
		if id == 11 { // the data section
			sec := wasm[body:next]
			count, k := binary.Uvarint(sec)
			if k <= 0 {
				return 0, false
			}
			p := k
			for range count {
				flags, k := binary.Uvarint(sec[p:])
				if k <= 0 {
					return 0, false
				}
				p += k
				switch flags {
				case 1: // passive: copied where the code says, which reads as the code's own stores
				case 0, 2:
					if flags == 2 {
						if _, k = binary.Uvarint(sec[p:]); k <= 0 { // the memory index
							return 0, false
						}
						p += k
					}
					if p >= len(sec) || sec[p] != 0x41 { // i32.const
						return 0, false
					}
					v, k := sleb(sec[p+1:])
					if k <= 0 || p+1+k >= len(sec) || sec[p+1+k] != 0x0b {
						return 0, false
					}
					p += 1 + k + 1
					low = min(low, uint64(uint32(v)))
				default:
					return 0, false
				}
				length, k := binary.Uvarint(sec[p:])
				if k <= 0 || length > uint64(len(sec)-p-k) {
					return 0, false
				}
				p += k + int(length)
			}
		}
		i = next
	}
	if low == 1<<32 {
		return 0, false
	}
	return uint32(low), true
}

// sleb reads a signed LEB128 number of at most 5 bytes (an i32).
func sleb(b []byte) (int64, int) {
	var v int64
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		v |= int64(b[i]&0x7f) << shift
		shift += 7
		if b[i]&0x80 == 0 {
			if shift < 64 && b[i]&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}
