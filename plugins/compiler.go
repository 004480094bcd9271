package plugins

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// Compiling a module runs wazero's optimising compiler over bytes a tenant
// chose, and a hostile module can make it run for minutes and take
// gigabytes (a function of nested blocks: compile time grows with the
// square of their depth). wazero cannot interrupt a compile. So a Runtime
// compiles each module it has not compiled before in a child process —
// this program, started again — under a deadline (Limits.CompileTimeout),
// a memory limit (Limits.MaxCompileBytes) and a CPU limit; the child
// writes the machine code to the compilation cache, and this process then
// loads it from there. A child that is killed or runs out of memory
// refuses the module, with the reason; this process never ran the
// compiler on it.
//
// The child is this program's own binary: the init function below turns a
// process started with compilerEnv into the compiler, before main runs.
// Every program that imports this package can therefore serve as its own
// compiler, with nothing to set up. Options.CompileInProcess turns the
// child off (then only Limits.MaxModuleBytes bounds a compile).

// compilerEnv marks a process started as the compiler; its value is the
// protocol version.
const (
	compilerEnv      = "AGENTIC_PLUGINS_COMPILER"
	compilerProtocol = "1"
)

func init() {
	if os.Getenv(compilerEnv) == compilerProtocol {
		os.Exit(serveCompile(os.Stdin, os.Stdout))
	}
}

// compileRequest is the first line the compiler reads; the module's bytes
// follow, to the end of its input.
type compileRequest struct {
	CacheDir    string `json:"cache_dir"`
	MemoryPages uint32 `json:"memory_pages"`
	Workers     int    `json:"workers"`
	MaxBytes    int64  `json:"max_bytes"`   // memory beyond what the process uses at start
	CPUSeconds  uint64 `json:"cpu_seconds"` // 0: no CPU limit
	// Meter: the module is the original, to validate and meter (under
	// MaxTableElements) before compiling; the metered bytes are sent
	// back. Else it is compiled as it is.
	Meter            bool   `json:"meter"`
	MaxTableElements uint32 `json:"max_table_elements"`
}

// compileResult is what the compiler writes: the error, if any, else the
// size of the metered module, whose bytes follow the line.
type compileResult struct {
	Error   string `json:"error,omitempty"`
	Metered int    `json:"metered,omitempty"`
}

// serveCompile is the compiler process: it reads a request, limits its
// own memory and CPU, compiles the module into the cache, and reports.
// It returns the process's exit code.
func serveCompile(in io.Reader, out io.Writer) int {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugins compiler: reading the request: %v\n", err)
		return 2
	}
	var req compileRequest
	if err := json.Unmarshal(line, &req); err != nil {
		fmt.Fprintf(os.Stderr, "plugins compiler: bad request: %v\n", err)
		return 2
	}
	wasm, err := io.ReadAll(br)
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugins compiler: reading the module: %v\n", err)
		return 2
	}
	if err := limitSelf(req.MaxBytes, req.CPUSeconds); err != nil {
		fmt.Fprintf(os.Stderr, "plugins compiler: limiting itself: %v\n", err)
		return 2
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(req.CacheDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugins compiler: the compilation cache: %v\n", err)
		return 2
	}
	res := compileResult{}
	var metered []byte
	if req.Meter {
		metered, err = prepare(wasm, Limits{MemoryPages: req.MemoryPages, MaxTableElements: req.MaxTableElements})
		wasm, res.Metered = metered, len(metered)
	}
	if err == nil {
		err = compileInto(ctx, cache, req.MemoryPages, req.Workers, wasm)
	}
	if err != nil {
		res = compileResult{Error: err.Error()}
		metered = nil
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return 2
	}
	if _, err := out.Write(metered); err != nil {
		return 2
	}
	return 0
}

// prepare returns the metered form of the module wasm, or why it is
// refused. An invalid original must not become valid once metered: one
// that names a global, type or local past its own would name the meter's.
// The meter refuses every such name, and everything else invalid stays
// invalid through the rewrite (it only moves function indices, all
// alike, and adds instructions that leave the stack as they found it), so
// that wazero's validation of the metered module when it compiles refuses
// it (TestCorpusStaysValid and FuzzInstrument hold the rewrite to that,
// both ways, on wazero's corpus and on mutations). Validating the original
// with wazero first would double a module's cold start (0.7 to 1.8 s for
// a 3.4 MB Go plugin here). It runs in the compiler process, under its
// deadline and memory bound (or in this one, with
// Options.CompileInProcess). Its errors are the module's, said without
// the meter's name.
func prepare(wasm []byte, l Limits) ([]byte, error) {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return nil, errors.New("not a WebAssembly module (no \\0asm magic)")
	}
	metered, err := meter(wasm, l)
	if err != nil {
		return nil, fmt.Errorf("it is not a module the host can meter: %s", strings.TrimPrefix(err.Error(), "fuel: "))
	}
	return metered, nil
}

// compileInto compiles wasm with the runtime configuration a Module's
// instances use (which the cache keys on), so that loading the module
// afterwards finds its machine code in the cache.
func compileInto(ctx context.Context, cache wazero.CompilationCache, pages uint32, workers int, wasm []byte) error {
	r := wazero.NewRuntimeWithConfig(ctx, runtimeConfig(cache, pages))
	defer r.Close(ctx)
	_, err := r.CompileModule(experimental.WithCompilationWorkers(ctx, workers), wasm)
	return err
}

// runtimeConfig is the wazero configuration every module runs under.
//
// Close-on-context-done is off: it makes compiled code leave for Go at
// every loop back-edge (twice the time of a warm call here, see
// docs/performance.md), and fuel does its work. Every module runs
// metered (fuel.go): a guest calls check at least once per slice of fuel,
// where the host checks the call's context and the goroutine meets Go's
// scheduler and collector; host functions check the context too; a start
// function runs as a call.
func runtimeConfig(cache wazero.CompilationCache, pages uint32) wazero.RuntimeConfig {
	return wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithCloseOnContextDone(false).
		WithMemoryLimitPages(pages)
}

// maxCompilerOutput bounds what is kept of the compiler's stdout and
// stderr.
const maxCompilerOutput = 64 << 10

// compileIsolated validates, meters and compiles the module wasm in a
// compiler process into the runtime's cache (or, for a runtime loading
// modules unmetered, compiles it as it is), unless this runtime did so
// already, and returns the bytes to load: the metered module. Errors are
// the package's: ErrInvalidModule (with the reason) when the module is
// invalid, cannot be metered or does not compile within its limits, the
// context's error when ctx ended first.
func (r *Runtime) compileIsolated(ctx context.Context, wasm []byte, hash string, l Limits) ([]byte, error) {
	key := r.preparedKey(hash, l)
	if out, ok := r.prepared.get(key); ok {
		return out, nil
	}
	if err := r.compiles.acquire(ctx); err != nil {
		return nil, err
	}
	defer r.compiles.release()
	if out, ok := r.prepared.get(key); ok {
		return out, nil
	}
	if out, ok := r.preparedOnDisk(key, l); ok {
		r.prepared.put(key, out)
		return out, nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.CompileTimeout)
	defer cancel()
	exe, err := selfExecutable()
	if err != nil {
		return nil, fmt.Errorf("plugins: finding this program to start the compiler process: %w (Options.CompileInProcess compiles in this process instead)", err)
	}
	header, _ := json.Marshal(compileRequest{
		CacheDir:         r.cacheDir,
		MemoryPages:      l.MemoryPages,
		Workers:          r.workers,
		MaxBytes:         l.MaxCompileBytes,
		CPUSeconds:       cpuSeconds(l.CompileTimeout, r.workers),
		Meter:            !r.unmetered,
		MaxTableElements: l.MaxTableElements,
	})
	r.compilerRuns.Add(1)
	running := r.compilersRunning.Add(1)
	defer r.compilersRunning.Add(-1)
	for peak := r.compilersPeak.Load(); running > peak && !r.compilersPeak.CompareAndSwap(peak, running); peak = r.compilersPeak.Load() {
	}
	cmd := exec.CommandContext(cctx, exe)
	// The race detector (in test binaries) sleeps a second at exit unless
	// told not to.
	cmd.Env = []string{compilerEnv + "=" + compilerProtocol, "GORACE=atexit_sleep_ms=0"}
	cmd.Stdin = io.MultiReader(bytes.NewReader(append(header, '\n')), bytes.NewReader(wasm))
	// The metered module comes back on stdout: at most about an eighth
	// larger than the original, and a few bytes a function.
	stdout := &cappedBuffer{max: maxCompilerOutput + 2*len(wasm)}
	stderr := &cappedBuffer{max: maxCompilerOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// WaitDelay bounds the wait for the copies of stdin and the outputs
	// once the process has exited or been killed: the compiler starts no
	// process of its own, so they end as soon as the goroutines copying
	// them are scheduled, which on a loaded machine took over a second
	// (an answered compile then failed as "WaitDelay expired").
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case cctx.Err() != nil:
		return nil, detailed(ErrInvalidModule, "it did not finish compiling within %s (Limits.CompileTimeout): the compile was stopped", l.CompileTimeout)
	case runErr != nil:
		return nil, r.compilerFailed(runErr, stderr.String(), l, time.Since(start))
	}
	line, rest, _ := bytes.Cut(stdout.Bytes(), []byte("\n"))
	var res compileResult
	if err := json.Unmarshal(line, &res); err != nil {
		return nil, fmt.Errorf("plugins: the compiler process answered %q: %v (stderr: %s)", snippet(stdout.Bytes()), err, firstLines(stderr.String(), 3))
	}
	if res.Error != "" {
		return nil, detailed(ErrInvalidModule, "%v", oneLine(errors.New(res.Error)))
	}
	out := wasm
	if !r.unmetered {
		if len(rest) != res.Metered || res.Metered == 0 {
			return nil, fmt.Errorf("plugins: the compiler process sent %d bytes of the metered module, it said %d", len(rest), res.Metered)
		}
		out = bytes.Clone(rest)
	}
	r.prepared.put(key, out)
	r.keepPrepared(key, l, out)
	return out, nil
}

// A module compiled once is compiled for every process that shares the
// cache directory: the machine code is in wazero's cache, and the metered
// bytes it was compiled from are kept beside it, under
// preparedDirName, so that the next process (a restart, another host on
// the machine) loads the module with neither a compiler process nor the
// meter (0.52 s to 0.16 s for the 3.4 MB get_account Go plugin here:
// BenchmarkLoadFromCache, docs/plugins.md#performance).
//
// A kept module is named by this program's build (its Go build ID:
// another build may meter differently; a build's modules unused for a
// week are removed), the module's hash and the limits its compile
// depends on; it is written only after a compiler process compiled
// it within its limits, and it ends with the SHA-256 of its bytes (a
// truncated or altered file is a miss, and is removed). The directory is
// as trusted as wazero's cache beside it, which holds machine code: a
// process that can write there can run code in this one already. Were the
// machine code gone from the cache while the metered bytes stay, the
// module would compile in this process: bytes that compiled within the
// limits before.
const preparedDirName = "agentic-prepared"

// executableID names this program's build: its Go build ID (which
// changes with any change to what it was built from), read from the
// binary's ELF note or the start of its text, else the SHA-256 of the
// whole binary (160 ms for 58 MB here), or "" when it cannot be read (then
// nothing is kept on disk).
var executableID = sync.OnceValue(func() string {
	exe, err := selfExecutable()
	if err != nil {
		return ""
	}
	if id := goBuildID(exe); id != "" {
		return "go:" + id
	}
	f, err := os.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
})

// goBuildID reads the Go build ID of the binary at path, as go tool buildid
// does: an ELF binary's .note.go.buildid note, else the quoted string after
// "\xff Go build ID: " in its first 32 KiB; "" when there is none.
func goBuildID(path string) string {
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		sec := f.Section(".note.go.buildid")
		if sec == nil {
			return ""
		}
		note, err := sec.Data()
		// namesz, descsz, type, then the name "Go\x00\x00" and the ID.
		if err != nil || len(note) < 16 || string(note[12:16]) != "Go\x00\x00" {
			return ""
		}
		n := int(binary.LittleEndian.Uint32(note[4:8]))
		if f.ByteOrder == binary.BigEndian {
			n = int(binary.BigEndian.Uint32(note[4:8]))
		}
		if n <= 0 || 16+n > len(note) {
			return ""
		}
		return string(note[16 : 16+n])
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 32<<10)
	n, _ := io.ReadFull(f, head)
	const prefix = "\xff Go build ID: \""
	_, rest, ok := bytes.Cut(head[:n], []byte(prefix))
	if !ok {
		return ""
	}
	id, _, ok := bytes.Cut(rest, []byte("\""))
	if !ok || len(id) == 0 {
		return ""
	}
	return string(id)
}

// preparedPath is where the metered module of key under l is kept, or ""
// when this runtime keeps none on disk (its cache is its own): a file
// named by the key and the limits, in a directory of this build.
func (r *Runtime) preparedPath(key string, l Limits) string {
	if r.cacheDir == "" || r.tmpCache {
		return ""
	}
	id := executableID()
	if id == "" {
		return ""
	}
	build := sha256.Sum256([]byte(id))
	dir := filepath.Join(r.cacheDir, preparedDirName, hex.EncodeToString(build[:16]))
	r.pruneKept.Do(func() { pruneKeptBuilds(dir, time.Now()) })
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", key, l.MemoryPages))
	return filepath.Join(dir, hex.EncodeToString(sum[:])+".wasm")
}

// keptBuildTTL is how long the modules kept by a build no runtime has used
// stay on disk: past it, the next runtime to use the directory removes
// them (each deploy of a new build would otherwise leave its modules
// behind for good).
const keptBuildTTL = 7 * 24 * time.Hour

// pruneKeptBuilds marks dir, this build's, as used now (creating it), and
// removes its siblings, other builds' kept modules, unused for
// keptBuildTTL. Errors leave things as they are.
func pruneKeptBuilds(dir string, now time.Time) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	_ = os.Chtimes(dir, now, now)
	siblings, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		return
	}
	for _, e := range siblings {
		if !e.IsDir() || e.Name() == filepath.Base(dir) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > keptBuildTTL {
			_ = os.RemoveAll(filepath.Join(filepath.Dir(dir), e.Name()))
		}
	}
}

// preparedOnDisk reads the metered module of key under l, if a compiler
// process of this binary made it in this cache directory.
func (r *Runtime) preparedOnDisk(key string, l Limits) ([]byte, bool) {
	path := r.preparedPath(key, l)
	if path == "" {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	if len(b) <= sha256.Size {
		_ = os.Remove(path)
		return nil, false
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		r.logger.Warn("plugins: a kept metered module is damaged; compiling the module again", "path", path)
		_ = os.Remove(path)
		return nil, false
	}
	return body, true
}

// keepPrepared writes the metered module of key under l beside the
// compilation cache (whole or not at all: a temporary file renamed).
// Failing to is not an error: the next process compiles again.
func (r *Runtime) keepPrepared(key string, l Limits, metered []byte) {
	path := r.preparedPath(key, l)
	if path == "" {
		return
	}
	err := func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.CreateTemp(filepath.Dir(path), ".keep-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		sum := sha256.Sum256(metered)
		_, err = f.Write(append(bytes.Clone(metered), sum[:]...))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return os.Rename(f.Name(), path)
	}()
	if err != nil {
		r.logger.Debug("plugins: keeping the metered module for the next process", "err", err)
	}
}

// preparedKey names what a compile of the module hash under l makes: the
// metered bytes depend on the module and on the meter's options.
func (r *Runtime) preparedKey(hash string, l Limits) string {
	return fmt.Sprintf("%s/%d/%v", hash, l.MaxTableElements, r.unmetered)
}

// preparedCache keeps the metered modules this runtime has compiled (into
// its compilation cache), so that loading one again neither starts a
// compiler process nor meters it again. It holds at most
// maxPreparedBytes; past that, it starts over.
type preparedCache struct {
	mu    sync.Mutex
	m     map[string][]byte
	bytes int
}

const maxPreparedBytes = 256 << 20

func (c *preparedCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[key]
	return b, ok
}

func (c *preparedCache) put(key string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+len(b) > maxPreparedBytes {
		c.m, c.bytes = map[string][]byte{}, 0
	}
	if _, ok := c.m[key]; !ok {
		c.m[key] = b
		c.bytes += len(b)
	}
}

// cpuSeconds is the CPU limit of a compile: its deadline for each of its
// workers, and a little more: the deadline stops a compile first, the CPU
// limit only backs it up.
func cpuSeconds(timeout time.Duration, workers int) uint64 {
	return uint64(timeout/time.Second)*uint64(max(workers, 1)) + 2
}

// compilerFailed explains a compiler process that did not answer. A
// process that started and died compiling died of the module: it is
// refused (out of memory shows as the Go runtime's "out of memory", or as
// a crash of a process that grew to its limit, when an allocation outside
// the Go heap failed).
func (r *Runtime) compilerFailed(err error, stderr string, l Limits, took time.Duration) error {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("plugins: starting the compiler process: %w (Options.CompileInProcess compiles in this process instead)", err)
	}
	if killedForCPU(exit) {
		return detailed(ErrInvalidModule, "compiling it used more CPU than its limit (%d s of CPU time): the compile was stopped", cpuSeconds(l.CompileTimeout, r.workers))
	}
	if strings.Contains(stderr, "out of memory") || maxRSS(exit) > l.MaxCompileBytes/2 {
		return detailed(ErrInvalidModule, "compiling it needed more than %d MiB (Limits.MaxCompileBytes): the compile was stopped after %s", l.MaxCompileBytes>>20, took.Round(time.Millisecond))
	}
	stderr = clip(strings.Join(strings.Fields(firstLines(stderr, 3)), " "), 500)
	r.logger.Warn("plugins: the compiler process died compiling a module", "err", err, "stderr", stderr)
	return detailed(ErrInvalidModule, "the compiler process died compiling it (%v: %s)", err, stderr)
}

// selfExecutable is this program's binary: /proc/self/exe on Linux, which
// still works when the file was replaced since the process started.
func selfExecutable() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
