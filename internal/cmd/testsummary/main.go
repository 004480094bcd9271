// Command testsummary reads `go test -json` on stdin and prints what `go
// test` prints without -json — each package's result, and the output of the
// tests that failed — then the slowest tests and packages of the run, and
// the time the run took (its first event to its last), so that a suite
// that grows slower says where (make test).
//
// Usage:
//
//	go test -json ./... | go run ./internal/cmd/testsummary [-slowest N]
//
// It exits 1 when a test, a package or a build failed, 0 otherwise; a line
// that is not a test event (a build error before the events) is printed as
// it is, and counts as a failure.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is a test's duration.
type timing struct {
	pkg, test string
	took      time.Duration
}

func main() {
	slowest := flag.Int("slowest", 10, "list the `N` slowest tests (top-level tests, not subtests)")
	flag.Parse()
	os.Exit(summarize(os.Stdin, os.Stdout, *slowest))
}

// summarize copies the run on in to out as go test prints it, then the
// n slowest tests, and returns the exit status.
func summarize(in io.Reader, out io.Writer, n int) int {
	failed := false
	held := map[string][]string{} // a running test's output, printed if it fails
	var times, pkgs []timing
	var first, last time.Time
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintln(out, string(line)) // not an event: a build error, say
			if len(line) > 0 {
				failed = true
			}
			continue
		}
		if !e.Time.IsZero() {
			if first.IsZero() || e.Time.Before(first) {
				first = e.Time
			}
			if e.Time.After(last) {
				last = e.Time
			}
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				if e.Output != "PASS\n" { // go test without -v leaves it out
					fmt.Fprint(out, e.Output)
				}
			} else {
				held[key] = append(held[key], e.Output)
			}
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "fail", "pass", "skip":
			if e.Action == "fail" {
				failed = true
				if e.Test != "" {
					fmt.Fprint(out, strings.Join(held[key], ""))
				}
			}
			if e.Test == "" && e.Action != "skip" {
				pkgs = append(pkgs, timing{pkg: e.Package, took: time.Duration(e.Elapsed * float64(time.Second))})
			}
			if e.Test != "" {
				delete(held, key)
				if !strings.Contains(e.Test, "/") && e.Action != "skip" {
					times = append(times, timing{e.Package, e.Test, time.Duration(e.Elapsed * float64(time.Second))})
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: reading the run: %v\n", err)
		failed = true
	}
	sort.SliceStable(times, func(i, j int) bool { return times[i].took > times[j].took })
	if n > 0 && len(times) > 0 {
		fmt.Fprintf(out, "\nThe %d slowest tests:\n", min(n, len(times)))
		for _, t := range times[:min(n, len(times))] {
			fmt.Fprintf(out, "  %8.1fs  %s %s\n", t.took.Seconds(), t.test, t.pkg)
		}
		sort.SliceStable(pkgs, func(i, j int) bool { return pkgs[i].took > pkgs[j].took })
		fmt.Fprintf(out, "The %d slowest packages:\n", min(5, len(pkgs)))
		for _, p := range pkgs[:min(5, len(pkgs))] {
			fmt.Fprintf(out, "  %8.1fs  %s\n", p.took.Seconds(), p.pkg)
		}
	}
	if !first.IsZero() {
		fmt.Fprintf(out, "The run took %s.\n", last.Sub(first).Round(time.Second))
	}
	if failed {
		return 1
	}
	return 0
}
