package main

import (
	"io"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/agentichost/agentic/ledger
BenchmarkDecode/fast-2     	  230338	      6000 ns/op	 185.36 MB/s	    1368 B/op	      29 allocs/op
BenchmarkDecode/fast-2     	  230338	      5000 ns/op	 185.36 MB/s	    1368 B/op	      29 allocs/op
BenchmarkDecode/fast-2     	  230338	      9000 ns/op	 185.36 MB/s	    1368 B/op	      29 allocs/op
BenchmarkDecode/strict-2   	   29950	     30000 ns/op	  29.58 MB/s	    4248 B/op	      40 allocs/op
BenchmarkEncode/fast-2     	  800000	      1500 ns/op	 741.00 MB/s	    1152 B/op	       1 allocs/op
BenchmarkEncode/json-2     	  200000	      6000 ns/op	 185.00 MB/s	    2400 B/op	      10 allocs/op
pkg: github.com/agentichost/agentic/storage/redis
BenchmarkAppend/store-vs-xadd-2  20000  143919 ns/op  1.70 p50-store/xadd  1.60 p99-store/xadd  84 store-p50-us  180 store-p99-us  48 xadd-p50-us  103 xadd-p99-us
BenchmarkAppend/store-vs-xadd-2  20000  143919 ns/op  1.80 p50-store/xadd  1.50 p99-store/xadd  86 store-p50-us  180 store-p99-us  50 xadd-p50-us  103 xadd-p99-us
pkg: github.com/agentichost/agentic/storage/memory
BenchmarkLoad10k-2   30   38000000 ns/op
    memory_bench_test.go:12: a log line that is not a result
pkg: github.com/agentichost/agentic/host
BenchmarkAcceptUnderLoad/streaming-2  1  4e9 ns/op  7 accept-p50-ms  150 accept-p99-ms
BenchmarkAcceptUnderLoad/instant-2    1  2e9 ns/op  1 accept-p50-ms  70 accept-p99-ms
`

// TestSummary: medians of the runs, ratios against the comparison of the
// same run, and rows whose benchmarks did not run named as such.
func TestSummary(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.median("ledger", "BenchmarkDecode/fast", "ns/op"); v != 6000 {
		t.Errorf("median of 6000, 5000, 9000: %v", v)
	}
	if v, _ := r.median("redis", "BenchmarkAppend/store-vs-xadd", "p50-store/xadd"); v != 1.75 {
		t.Errorf("median of 1.70 and 1.80: %v", v)
	}
	var out strings.Builder
	summarize(&out, r)
	s := out.String()
	for _, want := range []string{
		"decode one step event", "6.0 µs", "strict decoder 30.0 µs (0.20×)",
		"encode one step event", "1.5 µs", "encoding/json 6.0 µs (0.25×)",
		"load a 10,000-event session, memory", "38.0 ms", "3.80 µs an event", "≤ 30 ms",
		"load a 10,000-event session, file", "(not in this run)", "BenchmarkLoad10k ./storage/file",
		"bare XADD p50 49 µs: p50 1.75×, p99 1.55×",
		"accept p99, 5,000 runs streaming at once", "150.0 ms", "instant model: 70.0 ms",
		"BenchmarkWarmCallVsBare ./plugins", "make bench-anchor (needs node, python3 and ANCHOR_DIR)",
		"BenchmarkJavaScriptCall ./plugins",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the summary lacks %q:\n%s", want, s)
		}
	}
}

// TestSummaryWarmCall: a plugin's warm call beside the bare call and the
// floor, as the sums' ratio and the medians' ratio.
func TestSummaryWarmCall(t *testing.T) {
	r, err := parse(strings.NewReader(`pkg: github.com/agentichost/agentic/plugins
BenchmarkWarmCallVsBare/go-echo-1KB-2  300  2710071 ns/op  220487 bare-B/call  1710906 bare-ns/call  423733 floor-ns/call  7880 host-B/call  575198 host-ns/call  0.3362 host/bare  1.20 host/floor  0.30 p50-host/bare  1.14 p50-host/floor
BenchmarkWarmCallVsBare/go-echo-1KB-2  300  2710071 ns/op  220487 bare-B/call  1710906 bare-ns/call  423733 floor-ns/call  7880 host-B/call  575198 host-ns/call  0.3362 host/bare  1.16 host/floor  0.30 p50-host/bare  1.18 p50-host/floor
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	summarize(&out, r)
	if want := "host/floor 1.18 (ratio of the calls' medians 1.16)"; !strings.Contains(out.String(), want) {
		t.Errorf("the summary lacks %q:\n%s", want, out.String())
	}
}

// TestSummaryAnchor: the anchor's rounds, as scripts/bench-anchor.sh
// writes them, become go test -bench lines (benchsummary -anchor-rounds,
// which the script runs for make bench) that give the step-CPU row:
// medians and their ratio.
func TestSummaryAnchor(t *testing.T) {
	var lines strings.Builder
	if err := anchorBench(&lines, strings.NewReader("12000 1300 1100\n10000 1100 900\n14000 1200 1000\n"+
		"lean 6000 700 600 500\nlean 5000 650 550 450\nlean 7000 800 700 600\n")); err != nil {
		t.Fatal(err)
	}
	r, err := parse(strings.NewReader(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	summarize(&out, r)
	for _, want := range []string{"(fake server)", "file 1200 µs (0.100×), memory 1000 µs (0.083×)", "the AI SDK 7 ToolLoopAgent on the same server: 12000 µs",
		"(lean server)", "file 700 µs (0.117×), memory 600 µs (0.100×), file on tmpfs 500 µs (0.083×)", "file 0.117× (lean)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	// A side that printed no figure fails rather than drop out.
	for _, rounds := range []string{"12000 1300 1100\n10000  900\n", "12000 1300 x\n", "lean 1 2\n", "1 2 3 4 5\n", ""} {
		if err := anchorBench(io.Discard, strings.NewReader(rounds)); err == nil {
			t.Errorf("anchorBench(%q) = nil, want an error", rounds)
		}
	}
}

// TestSummaryJavaScriptCall: a TypeScript tool's warm call beside its
// engine run bare, with its instance's memory and first call.
func TestSummaryJavaScriptCall(t *testing.T) {
	r, err := parse(strings.NewReader(`pkg: github.com/agentichost/agentic/plugins
BenchmarkJavaScriptCall-2  200  405412 ns/op  197983 bare-ns/call  25.67 cold-ms  9164 host-B/call  207253 host-ns/call  1.047 host/bare  1.25 host/floor  1408 instance-KiB
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	summarize(&out, r)
	for _, want := range []string{"TypeScript tool warm call, echo 1KB", "207 µs, host/bare 1.05, host/floor 1.25", "instance 1408 KiB", "first call after load 26 ms", "the same engine run bare: 198 µs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
}
