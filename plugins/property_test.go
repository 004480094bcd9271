package plugins_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	w "github.com/agentichost/agentic/plugins/internal/wasmgen"
)

// The sandbox's property, tried on modules nobody wrote by hand: modules
// generated from hostile shapes (loops, bulk memory and table
// instructions of any size, grows, recursion, calls through tables, the
// host functions whose work grows with their arguments) and the modules of
// wazero's own test corpus, mutated. Each goes through the host's real
// path — validation, the meter, compilation, instantiation (its start
// function) and a call of each export — with a short deadline, and:
//
//   - every load and call ends within its deadline and a bound;
//   - a heartbeat goroutine, and Go's collector, are never held up past a
//     bound while it runs (a guest that never returns to Go freezes every
//     goroutine at the next collection);
//   - the Go heap stays within what the limits allow (memories and tables
//     are Go memory in wazero).
//
// FuzzSandbox is the native fuzzer (make fuzz); TestSandboxProperty runs
// the seeds and a few hundred generated modules in every make test.

// The property's bounds, generous for a loaded machine and the race
// detector: an attack's limits are a deadline of 100 ms and 64 pages of
// memory; a violation is an order of magnitude past them, where the
// attacks this guards against run for ever.
const (
	propDeadline = 100 * time.Millisecond
	propPages    = 64
	propOverrun  = 5 * time.Second  // past the deadline, at most
	propStall    = 5 * time.Second  // the heartbeat's longest gap
	propHeap     = 1 << 30          // the Go heap after a call, at most
	propTick     = time.Millisecond // the heartbeat's period
)

// property is one process's runtime for the property and its heartbeat.
type property struct {
	rt *plugins.Runtime

	mu       sync.Mutex
	last     time.Time
	maxGap   time.Duration
	worstGap time.Duration // over every module
	maxOver  time.Duration
	overWhat string
	overs    []time.Duration // every call's time past its deadline (of those that reached it)
	runs     atomic.Int64
	refused  atomic.Int64
	loaded   atomic.Int64
	stopBeat chan struct{}
}

var (
	propOnce sync.Once
	prop     *property
)

// theProperty returns the process's runtime and heartbeat, started once:
// modules compile in this process (small modules; the compiler process is
// tested elsewhere), so that thousands an hour load.
func theProperty(t testing.TB) *property {
	propOnce.Do(func() {
		rt, err := plugins.NewRuntime(plugins.Options{CompileInProcess: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		prop = &property{rt: rt, last: time.Now(), stopBeat: make(chan struct{})}
		go prop.beat()
	})
	return prop
}

// beat ticks every propTick and keeps the longest gap between ticks.
func (p *property) beat() {
	tick := time.NewTicker(propTick)
	defer tick.Stop()
	for {
		select {
		case <-p.stopBeat:
			return
		case now := <-tick.C:
			p.mu.Lock()
			if gap := now.Sub(p.last); gap > p.maxGap {
				p.maxGap = gap
			}
			p.last = now
			p.mu.Unlock()
		}
	}
}

// resetGap starts a new measure of the heartbeat's longest gap.
func (p *property) resetGap() {
	p.mu.Lock()
	p.last, p.maxGap = time.Now(), 0
	p.mu.Unlock()
}

func (p *property) gap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.maxGap, time.Since(p.last))
}

// check runs the property on one module: load it, call each export, and
// fail t on a violation. fuel is the calls' fuel.
func (p *property) check(t testing.TB, wasm []byte, fuel int64) {
	p.runs.Add(1)
	limits := plugins.Limits{CallTimeout: propDeadline, Fuel: fuel, MemoryPages: propPages, Instances: 1}
	ctx := context.Background()
	p.resetGap()
	// A collection while the module runs: it must complete.
	stopGC := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stopGC:
				return
			default:
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() {
		close(stopGC)
		<-gcDone
	}()

	timed := func(what string, fn func() error) error {
		start := time.Now()
		err := fn()
		if over := time.Since(start) - propDeadline; over > propOverrun {
			t.Fatalf("%s took %s past its deadline of %s (%v)", what, over, propDeadline, err)
		} else {
			p.mu.Lock()
			if over > p.maxOver {
				p.maxOver, p.overWhat = over, what
			}
			if over >= 0 && strings.HasPrefix(what, "a call") {
				p.overs = append(p.overs, over)
			}
			p.mu.Unlock()
		}
		return err
	}
	var m *plugins.Module
	err := timed("the load", func() error {
		var err error
		m, err = p.rt.Load(ctx, plugins.Source{Name: "prop", Wasm: wasm, Tenant: "prop", Limits: limits})
		return err
	})
	if err != nil {
		p.refused.Add(1)
		if !errors.Is(err, plugins.ErrInvalidModule) && !errors.Is(err, plugins.ErrNoDescription) &&
			!errors.Is(err, plugins.ErrInvalidDescription) && !errors.Is(err, plugins.ErrABIVersion) {
			t.Fatalf("a load failed other than as an invalid module: %v", err)
		}
	} else {
		p.loaded.Add(1)
		for _, export := range m.Exports() {
			timed("a call of "+export, func() error {
				_, err := m.CallExport(ctx, export, nil)
				return err
			})
		}
		m.Close(ctx)
		<-m.Done()
	}
	gap := p.gap()
	p.mu.Lock()
	p.worstGap = max(p.worstGap, gap)
	p.mu.Unlock()
	if gap > propStall {
		t.Fatalf("the heartbeat stalled %s while the module ran (bound %s)", gap, propStall)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > propHeap {
		t.Fatalf("the Go heap holds %d MiB after the module ran (bound %d MiB)", ms.HeapAlloc>>20, propHeap>>20)
	}
}

// gen reads the fuzzer's bytes as choices.
type gen struct {
	b []byte
	i int
}

func (g *gen) byte() byte {
	if g.i >= len(g.b) {
		return 0
	}
	g.i++
	return g.b[g.i-1]
}

func (g *gen) n(k int) int { return int(g.byte()) % k }

func (g *gen) u32() uint32 {
	var v [4]byte
	for i := range v {
		v[i] = g.byte()
	}
	return binary.LittleEndian.Uint32(v[:])
}

// size is a length or count: small, a page's worth, all of memory, or
// anything.
func (g *gen) size() int32 {
	switch g.n(5) {
	case 0:
		return int32(g.n(64))
	case 1:
		return 65536
	case 2:
		return propPages << 16
	case 3:
		return int32(g.u32() >> 8)
	}
	return int32(g.u32())
}

// Imports of generated modules, in this order.
var genImports = []w.Import{
	logImport,
	randomImport,
	allocImport,
	lengthImport,
	{Module: "extism:host/env", Name: "reset", Type: 0},
}

// generate builds a module from the bytes: up to four functions of
// hostile statements, a memory, maybe a table holding every function,
// maybe a start function; export "go" is function 0.
func generate(b []byte) []byte {
	g := &gen{b: b}
	nf := 1 + g.n(4)
	fi := uint32(len(genImports)) // the first defined function
	m := w.Module{Types: hostileTypes, Imports: genImports, Memory: &w.Memory{Min: uint32(g.n(propPages + 1)), Max: propPages, HasMax: true}}
	table := g.n(2) == 0
	if table {
		m.Tables = []w.Table{{Min: uint32(nf), Max: uint32(nf + g.n(100)), HasMax: g.n(2) == 0}}
		var fns []uint32
		for i := range nf {
			fns = append(fns, fi+uint32(i))
		}
		m.Elems = []w.Elem{{Offset: 0, Funcs: fns}}
	}
	for range nf {
		m.Funcs = append(m.Funcs, w.Func{Type: 0, Locals: []w.Local{{Count: 2, Type: w.I32}}, Code: g.statements(3, nf, fi, table)})
	}
	m.Exports = []w.Export{w.ExportFunc("go", fi)}
	if g.n(4) == 0 {
		s := fi + uint32(g.n(nf))
		m.Start = &s
	}
	return m.Encode()
}

// statements writes up to six stack-neutral statements, nesting loops and
// blocks depth deep at most.
func (g *gen) statements(depth, nf int, fi uint32, table bool) []byte {
	var c []byte
	for range 1 + g.n(6) {
		c = g.statement(c, depth, nf, fi, table)
	}
	return c
}

func (g *gen) statement(c []byte, depth, nf int, fi uint32, table bool) []byte {
	switch k := g.n(14); {
	case k == 0:
		return w.MemoryFill(w.I32c(w.I32c(w.I32c(c, g.size()), int32(g.byte())), g.size()))
	case k == 1:
		return w.MemoryCopy(w.I32c(w.I32c(w.I32c(c, g.size()), g.size()), g.size()))
	case k == 2:
		return append(w.I32c(c, int32(g.n(80))), w.MemoryGrow, 0x00, w.Drop)
	case k == 3 && table:
		return append(w.TableGrow(w.I32c(w.RefNull(c), g.size())), w.Drop)
	case k == 4 && table:
		return w.TableFill(w.I32c(w.RefNull(w.I32c(c, int32(g.n(nf)))), g.size()))
	case k == 5:
		return append(w.I32c(w.I32c(c, g.size()), g.size()), w.Call, 1, w.Drop) // random_get
	case k == 6:
		return append(w.SLEB(append(c, w.I64Const), int64(g.size())), w.Call, 2, w.Drop) // alloc
	case k == 7:
		return append(w.SLEB(append(c, w.I64Const), int64(g.size())), w.Call, 3, w.Drop) // length
	case k == 8:
		return append(c, w.Call, 4) // reset
	case k == 9:
		return append(c, w.Call, byte(fi)+byte(g.n(nf))) // a call, maybe of itself
	case k == 10 && table:
		return append(w.I32c(c, int32(g.n(nf))), w.CallInd, 0, 0) // through the table
	case k == 11 && depth > 0:
		// A loop: for ever, or while a local counts to a bound.
		body := g.statements(depth-1, nf, fi, table)
		if g.n(2) == 0 {
			return w.Forever(c, body...)
		}
		c = append(c, w.Block, w.Void, w.Loop, w.Void)
		c = append(c, body...)
		c = append(c, w.LocalGet, 0, w.I32Const, 1, w.I32Add, w.LocalTee, 0)
		c = w.I32c(c, int32(g.u32()>>12))
		return append(c, 0x49, w.BrIf, 0, w.End, w.End) // i32.lt_u; br_if 0
	case k == 12 && depth > 0:
		c = append(c, w.Block, w.Void)
		c = append(c, g.statements(depth-1, nf, fi, table)...)
		c = append(w.I32c(c, int32(g.n(2))), w.BrIf, 0)
		c = append(c, g.statements(depth-1, nf, fi, table)...)
		return append(c, w.End)
	}
	// Straight-line arithmetic.
	for range 1 + g.n(200) {
		c = append(c, w.LocalGet, 1, w.I32Const, 3, w.I32Add, w.LocalSet, 1)
	}
	return c
}

// propFuel is a call's fuel from the fuzzer's bytes: from none to the
// default.
func propFuel(b byte) int64 {
	return []int64{1_000, 1_000_000, 100_000_000, plugins.DefaultFuel, 1 << 60}[int(b)%5]
}

// FuzzSandbox: the property on generated modules (input starting with an
// even byte) and on any bytes as a module (odd), seeded with the hostile
// attacks and wazero's corpus.
func FuzzSandbox(f *testing.F) {
	for i := range 64 {
		seed := make([]byte, 256)
		r := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range seed {
			seed[j] = byte(r.Uint32())
		}
		seed[0] &^= 1
		f.Add(seed)
	}
	for _, a := range hostileAttacks {
		f.Add(append([]byte{1, 3}, a.wasm...))
	}
	for _, file := range propCorpus(f, 200) {
		wasm, err := os.ReadFile(file)
		if err == nil {
			f.Add(append([]byte{1, 3}, wasm...))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		p := theProperty(t)
		wasm := in[2:]
		if in[0]%2 == 0 {
			wasm = generate(in[1:])
		}
		p.check(t, wasm, propFuel(in[1]))
	})
}

// propCorpus returns up to n modules of wazero's test corpus (valid or
// not), spread over it.
func propCorpus(tb testing.TB, n int) []string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tetratelabs/wazero").Output()
	if err != nil {
		tb.Logf("no corpus: wazero's module directory: %v", err)
		return nil
	}
	var files []string
	filepath.WalkDir(strings.TrimSpace(string(out)), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".wasm") {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	if len(files) <= n {
		return files
	}
	step := len(files) / n
	var picked []string
	for i := 0; i < len(files) && len(picked) < n; i += step {
		picked = append(picked, files[i])
	}
	return picked
}

// TestSandboxProperty: the property on the hostile attacks, 200 modules of
// wazero's corpus and 300 generated modules (each with every fuel of
// propFuel's), in every make test. FuzzSandbox goes on from there.
func TestSandboxProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and runs about 500 modules")
	}
	p := theProperty(t)
	for i, a := range hostileAttacks {
		p.check(t, a.wasm, propFuel(byte(i)))
	}
	for i, file := range propCorpus(t, 200) {
		wasm, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p.check(t, wasm, propFuel(byte(i)))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		seed := make([]byte, 256)
		for j := range seed {
			seed[j] = byte(r.Uint32())
		}
		t.Run(fmt.Sprint("generated-", i), func(t *testing.T) {
			p.check(t, generate(seed), propFuel(byte(i)))
		})
	}
	p.mu.Lock()
	overs := slices.Clone(p.overs)
	p.mu.Unlock()
	slices.Sort(overs)
	q := func(f float64) time.Duration {
		if len(overs) == 0 {
			return 0
		}
		return overs[min(len(overs)-1, int(f*float64(len(overs))))].Round(100 * time.Microsecond)
	}
	t.Logf("%d modules: %d loaded, %d refused; %d calls ran to their deadline, past it by p50 %s, p99 %s; longest past a deadline %s (%s), longest heartbeat gap %s",
		p.runs.Load(), p.loaded.Load(), p.refused.Load(), len(overs), q(0.5), q(0.99), p.maxOver.Round(time.Millisecond), p.overWhat, p.worstGap.Round(time.Millisecond))
}
