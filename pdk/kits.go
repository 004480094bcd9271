//go:build !wasip1

package pdk

import "embed"

// Kits holds the sources of the plugin kits, for tools that write plugin
// projects which build outside this repository (agentic-host plugin new):
// this Go package with its go.mod and go.sum (its only dependency,
// github.com/extism/go-pdk, comes from the Go module proxy), the
// AssemblyScript kit (assemblyscript/index.ts and the package.json naming
// its npm dependencies), the C kit (c/agentic.h, c/agentic.c), the
// TypeScript kit (ts/agentic.ts, ts/build.mjs and the package.json naming
// its npm dependencies: TypeScript, esbuild and the JavaScript engine) and
// the Rust kit (rust/agentic.rs). It is not part of plugins built for Wasm.
//
//go:embed doc.go host.go native.go pdk.go wasm.go go.mod go.sum
//go:embed assemblyscript/index.ts assemblyscript/package.json
//go:embed c/agentic.h c/agentic.c
//go:embed ts/agentic.ts ts/build.mjs ts/package.json
//go:embed rust/agentic.rs
var Kits embed.FS
