package plugins

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
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
}

// compileResult is what the compiler writes: the compile error, if any.
type compileResult struct {
	Error string `json:"error,omitempty"`
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
	if err := compileInto(ctx, cache, req.MemoryPages, req.Workers, wasm); err != nil {
		res.Error = err.Error()
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return 2
	}
	return 0
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
// metered: a guest calls refill at least once per slice of fuel, where the
// host checks the call's context and the goroutine meets Go's scheduler
// and collector; host functions honour the context; a start function past
// Limits.StartFuel calls refill at every test of its fuel, which ends it
// at its deadline.
func runtimeConfig(cache wazero.CompilationCache, pages uint32) wazero.RuntimeConfig {
	return wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithCloseOnContextDone(false).
		WithMemoryLimitPages(pages)
}

// maxCompilerOutput bounds what is kept of the compiler's stdout and
// stderr.
const maxCompilerOutput = 64 << 10

// compileIsolated compiles wasm in a compiler process into the runtime's
// cache, unless this runtime compiled it already. Errors are the package's:
// ErrInvalidModule (with the reason) when the module does not compile
// within its limits, the context's error when ctx ended first.
func (r *Runtime) compileIsolated(ctx context.Context, wasm []byte, hash string, l Limits) error {
	if _, ok := r.compiled.Load(hash); ok {
		return nil
	}
	if err := r.compiles.acquire(ctx); err != nil {
		return err
	}
	defer r.compiles.release()
	if _, ok := r.compiled.Load(hash); ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.CompileTimeout)
	defer cancel()
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("plugins: finding this program to start the compiler process: %w (Options.CompileInProcess compiles in this process instead)", err)
	}
	header, _ := json.Marshal(compileRequest{
		CacheDir:    r.cacheDir,
		MemoryPages: l.MemoryPages,
		Workers:     r.workers,
		MaxBytes:    l.MaxCompileBytes,
		CPUSeconds:  cpuSeconds(l.CompileTimeout, r.workers),
	})
	cmd := exec.CommandContext(cctx, exe)
	// The race detector (in test binaries) sleeps a second at exit unless
	// told not to.
	cmd.Env = []string{compilerEnv + "=" + compilerProtocol, "GORACE=atexit_sleep_ms=0"}
	cmd.Stdin = io.MultiReader(bytes.NewReader(append(header, '\n')), bytes.NewReader(wasm))
	stdout, stderr := &cappedBuffer{max: maxCompilerOutput}, &cappedBuffer{max: maxCompilerOutput}
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
		return ctx.Err()
	case cctx.Err() != nil:
		return detailed(ErrInvalidModule, "it did not finish compiling within %s (Limits.CompileTimeout): the compile was stopped", l.CompileTimeout)
	case runErr != nil:
		return r.compilerFailed(runErr, stderr.String(), l, time.Since(start))
	}
	var res compileResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		return fmt.Errorf("plugins: the compiler process answered %q: %v (stderr: %s)", snippet(stdout.Bytes()), err, firstLines(stderr.String(), 3))
	}
	if res.Error != "" {
		return detailed(ErrInvalidModule, "%v", oneLine(errors.New(res.Error)))
	}
	r.compiled.Store(hash, struct{}{})
	return nil
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
