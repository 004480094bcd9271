//go:build wasip1

package pdk

import (
	gopdk "github.com/extism/go-pdk"
)

// The exports the host calls. Each reads its JSON input, runs Dispatch and
// writes the JSON output; the Extism return code is always 0 (errors are in
// the envelope).

//go:wasmexport describe
func exportDescribe() int32 { return run("describe") }

//go:wasmexport call
func exportCall() int32 { return run("call") }

//go:wasmexport validate
func exportValidate() int32 { return run("validate") }

//go:wasmexport decide
func exportDecide() int32 { return run("decide") }

func run(export string) int32 {
	gopdk.Output(Dispatch(export, gopdk.Input()))
	return 0
}

// The host's functions, in Extism's user namespace. Arguments and results
// are offsets of Extism memory blocks.

//go:wasmimport extism:host/user log
func hostLog(level int32, msg uint64)

//go:wasmimport extism:host/user kv_get
func hostKVGet(key uint64) uint64

//go:wasmimport extism:host/user kv_set
func hostKVSet(key, value uint64) uint64

//go:wasmimport extism:host/user kv_delete
func hostKVDelete(key uint64) uint64

//go:wasmimport extism:host/user http_request
func hostHTTP(req uint64) uint64

//go:wasmimport extism:host/user idempotency_key
func hostIdempotencyKey() uint64

//go:wasmimport extism:host/user wait_event
func hostWaitEvent(key uint64) uint64

//go:wasmimport extism:host/user wait_for
func hostWaitFor(ms int64) uint64

func block(b []byte) uint64 {
	m := gopdk.AllocateBytes(b)
	return m.Offset()
}

// take reads the block at off and frees it; 0 is no block.
func take(off uint64) []byte {
	if off == 0 {
		return nil
	}
	m := gopdk.FindMemory(off)
	b := m.ReadBytes()
	m.Free()
	if b == nil {
		b = []byte{}
	}
	return b
}

func platformConfig(key string) (string, bool) { return gopdk.GetConfig(key) }

func free(off uint64) {
	m := gopdk.NewMemory(off, 0)
	m.Free()
}

func platformLog(level int32, msg []byte) {
	off := block(msg)
	hostLog(level, off)
	free(off)
}

func platformKVGet(key []byte) []byte {
	k := block(key)
	res := take(hostKVGet(k))
	free(k)
	return res
}

func platformKVSet(key, value []byte) []byte {
	k, v := block(key), block(value)
	res := take(hostKVSet(k, v))
	free(k)
	free(v)
	return res
}

func platformKVDelete(key []byte) []byte {
	k := block(key)
	res := take(hostKVDelete(k))
	free(k)
	return res
}

func platformHTTP(req []byte) []byte {
	r := block(req)
	res := take(hostHTTP(r))
	free(r)
	return res
}

func platformIdempotencyKey() []byte { return take(hostIdempotencyKey()) }

func platformWaitEvent(key []byte) []byte {
	k := block(key)
	res := take(hostWaitEvent(k))
	free(k)
	return res
}

func platformWaitFor(ms int64) []byte { return take(hostWaitFor(ms)) }
