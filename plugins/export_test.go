package plugins

// LoadUnmetered makes r load modules as they are, with no fuel: no bound on
// a guest, the floor BenchmarkWarmCallVsBare measures metering against.
func LoadUnmetered(r *Runtime) { r.unmetered = true }
