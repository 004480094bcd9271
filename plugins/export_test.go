package plugins

import "context"

// LoadUnmetered makes r load modules as they are, with no fuel: no bound on
// a guest, the floor BenchmarkWarmCallVsBare measures metering against.
func LoadUnmetered(r *Runtime) { r.unmetered = true }

// PrepareForTest reads and prepares the module name's files as the
// watcher does on an event, and returns what commits the result.
func (w *DirWatcher) PrepareForTest(ctx context.Context, name string) (commit func()) {
	j := &syncJob{name: name}
	w.prepare(ctx, j)
	return func() { w.commit(ctx, j) }
}

// CompilerRuns is the number of compiler processes r started.
func CompilerRuns(r *Runtime) int64 { return r.compilerRuns.Load() }

// CompilersPeak is the most compiler processes r ran at once.
func CompilersPeak(r *Runtime) int64 { return r.compilersPeak.Load() }

// SharedPlugins is the number of compiled modules r's modules share.
func SharedPlugins(r *Runtime) int {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	return len(r.shared)
}

// ModuleBytes is the module's bytes as m keeps them.
func ModuleBytes(m *Module) []byte { return m.src.Wasm }
