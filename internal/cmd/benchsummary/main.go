// Command benchsummary reads the output of go test -bench (as make bench
// writes it to bin/bench.txt, several runs of each benchmark) and prints
// each hot path's figure beside its comparison from the same run and its
// target: the medians of the runs, and their ratio where the comparison
// is another measurement. docs/performance.md explains each row.
//
// Usage:
//
//	benchsummary bin/bench.txt
//	benchsummary -anchor-rounds ROUNDS
//
// With -anchor-rounds it writes the rounds of scripts/bench-anchor.sh (one
// line a round: the AI SDK's, the host's on file storage and on memory
// storage CPU µs per model step) in go test -bench's format, package
// "anchor", which make bench adds to bin/bench.txt and the summary's
// step-CPU row reads.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-anchor-rounds" {
		f, err := os.Open(os.Args[2])
		if err == nil {
			err = anchorBench(os.Stdout, f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchsummary:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchsummary BENCH_OUTPUT | benchsummary -anchor-rounds ROUNDS")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
	defer f.Close()
	res, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
	summarize(os.Stdout, res)
}

// anchorSides are the anchor's measurements a round, in the order
// scripts/bench-anchor.sh writes them: three, and a fourth (the file store
// on tmpfs) when the machine has /dev/shm.
var anchorSides = []string{"aisdk", "host-file", "host-memory", "host-file-tmpfs"}

// anchorServers are the model servers the anchor measures against, in the
// order the summary shows them: the project's fake (Go) and the lean one
// (scripts/leanmodel.py, Python).
var anchorServers = []string{"fake", "lean"}

// anchorBench writes the anchor's rounds as go test -bench results of
// package "anchor": one line a round and server, the server's name
// (fake or lean; a line without one is the fake's) and three numbers. A
// round without its three numbers fails: a side that printed no figure
// must not drop out of the summary unnoticed.
func anchorBench(w io.Writer, rounds io.Reader) error {
	var b strings.Builder
	b.WriteString("pkg: anchor\n")
	sc := bufio.NewScanner(rounds)
	n := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		n++
		server := "fake"
		if len(fields) > 0 && slices.Contains(anchorServers, fields[0]) {
			server, fields = fields[0], fields[1:]
		}
		if len(fields) != len(anchorSides) && len(fields) != len(anchorSides)-1 {
			return fmt.Errorf("anchor round %d: %q: want %d or %d figures (%s)", n, sc.Text(), len(anchorSides)-1, len(anchorSides), strings.Join(anchorSides, ", "))
		}
		for i, f := range fields {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || v <= 0 {
				return fmt.Errorf("anchor round %d: %s: %q is not a CPU time", n, anchorSides[i], f)
			}
			fmt.Fprintf(&b, "BenchmarkAnchorStep/%s/%s 1 %s cpu-us/step\n", server, anchorSides[i], f)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no anchor rounds")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// results holds every run's value of each (package, benchmark, unit).
type results map[string][]float64

// key names a measurement: the package's last path element, the
// benchmark without its -GOMAXPROCS suffix, and the unit.
func key(pkg, name, unit string) string { return pkg + " " + name + " " + unit }

var procs = regexp.MustCompile(`-\d+$`)

// parse reads go test -bench output.
func parse(r io.Reader) (results, error) {
	res := results{}
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p[strings.LastIndexByte(p, '/')+1:]
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // a benchmark's log line, not a result
		}
		name := procs.ReplaceAllString(fields[0], "")
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: value %q: %v", line, fields[i], err)
			}
			k := key(pkg, name, fields[i+1])
			res[k] = append(res[k], v)
		}
	}
	return res, sc.Err()
}

// median returns the median of a measurement's runs, and whether it has
// any.
func (r results) median(pkg, name, unit string) (float64, bool) {
	v := slices.Clone(r[key(pkg, name, unit)])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// row is one line of the summary.
type row struct{ path, figure, comparison, target string }

// summarize prints the rows whose benchmarks ran; the others say which
// benchmark would give them.
func summarize(w io.Writer, r results) {
	var rows []row
	add := func(path, figure, comparison, target string) {
		rows = append(rows, row{path, figure, comparison, target})
	}
	missing := func(path, bench string) { add(path, "(not in this run)", bench, "") }
	n := func(unit string, v float64) string {
		switch unit {
		case "ns/op":
			switch {
			case v >= 1e6:
				return fmt.Sprintf("%.1f ms", v/1e6)
			case v >= 1e3:
				return fmt.Sprintf("%.1f µs", v/1e3)
			}
			return fmt.Sprintf("%.0f ns", v)
		case "B":
			if v >= 1024 {
				return fmt.Sprintf("%.1f KiB", v/1024)
			}
			return fmt.Sprintf("%.0f B", v)
		}
		return fmt.Sprintf("%.3g %s", v, unit)
	}

	if fast, ok := r.median("ledger", "BenchmarkDecode/fast", "ns/op"); ok {
		strict, _ := r.median("ledger", "BenchmarkDecode/strict", "ns/op")
		add("decode one step event", n("ns/op", fast), fmt.Sprintf("strict decoder %s (%.2f×)", n("ns/op", strict), fast/strict), "")
	} else {
		missing("decode one step event", "BenchmarkDecode ./ledger")
	}
	if fast, ok := r.median("ledger", "BenchmarkEncode/fast", "ns/op"); ok {
		slow, _ := r.median("ledger", "BenchmarkEncode/json", "ns/op")
		add("encode one step event", n("ns/op", fast), fmt.Sprintf("encoding/json %s (%.2f×)", n("ns/op", slow), fast/slow), "")
	} else {
		missing("encode one step event", "BenchmarkEncode ./ledger")
	}
	for _, pkg := range []string{"memory", "file"} {
		if v, ok := r.median(pkg, "BenchmarkLoad10k", "ns/op"); ok {
			add("load a 10,000-event session, "+pkg, n("ns/op", v), fmt.Sprintf("%.2f µs an event", v/1e3/1e4), "≤ 30 ms")
		} else {
			missing("load a 10,000-event session, "+pkg, "BenchmarkLoad10k ./storage/"+pkg)
		}
	}
	if p50, ok := r.median("redis", "BenchmarkAppend/store-vs-xadd", "p50-store/xadd"); ok {
		p99, _ := r.median("redis", "BenchmarkAppend/store-vs-xadd", "p99-store/xadd")
		s50, _ := r.median("redis", "BenchmarkAppend/store-vs-xadd", "store-p50-us")
		x50, _ := r.median("redis", "BenchmarkAppend/store-vs-xadd", "xadd-p50-us")
		add("Redis append of one step", fmt.Sprintf("p50 %.0f µs", s50), fmt.Sprintf("bare XADD p50 %.0f µs: p50 %.2f×, p99 %.2f×", x50, p50, p99), "p50 ≤ 1.5×, p99 ≤ 2×")
	} else {
		missing("Redis append of one step", "BenchmarkAppend/store-vs-xadd ./storage/redis")
	}
	warm := false
	for _, c := range []string{"c-echo-16B", "c-echo-1KB", "go-echo-1KB", "get_account"} {
		name := "BenchmarkWarmCallVsBare/" + c
		ratio, ok := r.median("plugins", name, "host/bare")
		if !ok {
			continue
		}
		warm = true
		hb, _ := r.median("plugins", name, "host-B/call")
		bb, _ := r.median("plugins", name, "bare-B/call")
		hns, _ := r.median("plugins", name, "host-ns/call")
		comparison := fmt.Sprintf("bare Extism call, %s a call", n("B", bb))
		if floor, ok := r.median("plugins", name, "host/floor"); ok {
			comparison += fmt.Sprintf("; the unmetered floor: host/floor %.2f", floor)
			if p50, ok := r.median("plugins", name, "p50-host/floor"); ok {
				comparison += fmt.Sprintf(" (ratio of the calls' medians %.2f)", p50)
			}
		}
		add("plugin warm call, "+c, fmt.Sprintf("%.0f µs, host/bare %.2f, %s a call", hns/1e3, ratio, n("B", hb)), comparison, "host/bare ≤ 0.35, host/floor ≤ 1.3, ≤ 16 KiB")
	}
	if !warm {
		missing("plugin warm call", "BenchmarkWarmCallVsBare ./plugins")
	}
	if ratio, ok := r.median("plugins", "BenchmarkJavaScriptCall", "host/bare"); ok {
		hns, _ := r.median("plugins", "BenchmarkJavaScriptCall", "host-ns/call")
		bns, _ := r.median("plugins", "BenchmarkJavaScriptCall", "bare-ns/call")
		hb, _ := r.median("plugins", "BenchmarkJavaScriptCall", "host-B/call")
		kib, _ := r.median("plugins", "BenchmarkJavaScriptCall", "instance-KiB")
		cold, _ := r.median("plugins", "BenchmarkJavaScriptCall", "cold-ms")
		floor, _ := r.median("plugins", "BenchmarkJavaScriptCall", "host/floor")
		add("TypeScript tool warm call, echo 1KB", fmt.Sprintf("%.0f µs, host/bare %.2f, host/floor %.2f, %s a call; instance %.0f KiB; first call after load %.0f ms", hns/1e3, ratio, floor, n("B", hb), kib, cold),
			fmt.Sprintf("the same engine run bare: %.0f µs", bns/1e3), "—")
	} else {
		missing("TypeScript tool warm call", "BenchmarkJavaScriptCall ./plugins")
	}
	if rate, ok := r.median("fuel", "BenchmarkMeter/metered", "fuel/s"); ok {
		plain, _ := r.median("fuel", "BenchmarkMeter/plain", "ns/op")
		metered, _ := r.median("fuel", "BenchmarkMeter/metered", "ns/op")
		add("fuel, calibrated", fmt.Sprintf("%.2g fuel a second of a tight loop", rate), fmt.Sprintf("the loop unmetered: metered/plain %.2f", metered/plain), "—")
	} else {
		missing("fuel, calibrated", "BenchmarkMeter ./plugins/internal/fuel")
	}
	if v, ok := r.median("host", "BenchmarkIdleSessions", "idle-B/session"); ok {
		g, _ := r.median("host", "BenchmarkIdleSessions", "goroutines/session")
		re, _ := r.median("host", "BenchmarkIdleSessions", "reloaded-idle-B/session")
		add("heap per idle session (5,000, file storage)", n("B", v), fmt.Sprintf("%.4f goroutines a session; after a restart %s", g, n("B", re)), "≤ 1 KiB")
	} else {
		missing("heap per idle session", "BenchmarkIdleSessions ./host")
	}
	if g, ok := r.median("server", "BenchmarkIdleViewers", "goroutines/viewer"); ok {
		heap, _ := r.median("server", "BenchmarkIdleViewers", "heapKiB/viewer")
		stacks, _ := r.median("server", "BenchmarkIdleViewers", "stackKiB/viewer")
		add("one idle SSE viewer of a session (500 at once)", fmt.Sprintf("%.2f goroutines, %.1f KiB (%.1f heap, %.1f stacks)", g, heap+stacks, heap, stacks), "—", "≤ 32 KiB, ≤ 1 goroutine")
	} else {
		missing("an idle SSE viewer", "BenchmarkIdleViewers ./server")
	}
	if v, ok := r.median("host", "BenchmarkAcceptUnderLoad/streaming", "accept-p99-ms"); ok {
		floor, _ := r.median("host", "BenchmarkAcceptUnderLoad/instant", "accept-p99-ms")
		add("accept p99, 5,000 runs streaming at once", fmt.Sprintf("%.1f ms", v), fmt.Sprintf("the same against an instant model: %.1f ms", floor), "≤ 10 ms")
	} else {
		missing("accept p99 under load", "BenchmarkAcceptUnderLoad ./host")
	}
	for _, st := range []string{"file", "redis"} {
		for _, op := range []string{"answer", "resume"} {
			long, ok := r.median("host", "BenchmarkResumeLongSession/"+st+"/events=100000/"+op, "ns/op")
			if !ok {
				missing("a long session: "+op+", "+st, "BenchmarkResumeLongSession ./host")
				continue
			}
			short, _ := r.median("host", "BenchmarkResumeLongSession/"+st+"/events=1000/"+op, "ns/op")
			add(fmt.Sprintf("%s a message in a session of 100,000 events, %s", map[string]string{"answer": "answer", "resume": "resume a run"}[op], st),
				n("ns/op", long), fmt.Sprintf("at 1,000 events %s: %.2f×", n("ns/op", short), long/short), "≤ 2× the 1,000")
		}
	}
	if v, ok := r.median("host", "BenchmarkLoopStep/host", "ns/op"); ok {
		withModel, _ := r.median("host", "BenchmarkLoopStep/host+fake-model", "ns/op")
		modelOnly, _ := r.median("host", "BenchmarkLoopStep/fake-model-only", "ns/op")
		add("one loop step, the host's own cost", n("ns/op", v), fmt.Sprintf("through HTTP to the fake model %s, of which the model call alone %s", n("ns/op", withModel), n("ns/op", modelOnly)), "")
	} else {
		missing("one loop step", "BenchmarkLoopStep ./host")
	}
	worst, worstServer, anchored := 0.0, "", false
	for _, server := range anchorServers {
		a, ok := r.median("anchor", "BenchmarkAnchorStep/"+server+"/aisdk", "cpu-us/step")
		if !ok {
			continue
		}
		anchored = true
		f, _ := r.median("anchor", "BenchmarkAnchorStep/"+server+"/host-file", "cpu-us/step")
		m, _ := r.median("anchor", "BenchmarkAnchorStep/"+server+"/host-memory", "cpu-us/step")
		if f/a > worst {
			worst, worstServer = f/a, server
		}
		figure := fmt.Sprintf("file %.0f µs (%.3f×), memory %.0f µs (%.3f×)", f, f/a, m, m/a)
		if ft, ok := r.median("anchor", "BenchmarkAnchorStep/"+server+"/host-file-tmpfs", "cpu-us/step"); ok {
			figure += fmt.Sprintf(", file on tmpfs %.0f µs (%.3f×)", ft, ft/a)
		}
		add("harness CPU per model step, one Go tool ("+server+" server)", figure,
			fmt.Sprintf("the AI SDK 7 ToolLoopAgent on the same server: %.0f µs", a), "≤ 0.10× with file storage")
	}
	if anchored {
		add("harness CPU per model step, the worst server", fmt.Sprintf("file %.3f× (%s)", worst, worstServer), "the highest host/AI SDK ratio of the servers above", "≤ 0.10×")
	} else {
		missing("harness CPU per model step", "make bench-anchor (needs node, python3 and ANCHOR_DIR)")
	}

	wp, wf, wc := len("path"), len("figure"), len("comparison (same run)")
	for _, x := range rows {
		wp, wf, wc = max(wp, len([]rune(x.path))), max(wf, len([]rune(x.figure))), max(wc, len([]rune(x.comparison)))
	}
	line := func(a, b, c, d string) {
		fmt.Fprintf(w, "%s  %s  %s  %s\n", pad(a, wp), pad(b, wf), pad(c, wc), d)
	}
	line("path", "figure", "comparison (same run)", "target")
	for _, x := range rows {
		line(x.path, x.figure, x.comparison, x.target)
	}
}

// pad pads s with spaces to width runes.
func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(0, width-len([]rune(s))))
}
