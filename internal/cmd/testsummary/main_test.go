package main

import (
	"strings"
	"testing"
)

// TestSummarize: a run's package lines and a failed test's output are
// printed, a passing test's output is not, the slowest top-level tests and
// packages are listed slowest first, then the run's time, and a failure (of a test, or a line that is no
// event: a build error) is exit status 1.
func TestSummarize(t *testing.T) {
	run := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"quiet a\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB/sub","Output":"said by b's sub\n"}
{"Action":"pass","Package":"p","Test":"TestB/sub","Elapsed":9}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: wrong\n"}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":9.5}
{"Action":"output","Package":"p","Output":"FAIL\tp\t11.0s\n"}
{"Time":"2026-12-06T10:00:00Z","Action":"fail","Package":"p","Elapsed":11}
{"Action":"output","Package":"q","Output":"ok  \tq\t0.2s\n"}
{"Action":"pass","Package":"q","Test":"TestC","Elapsed":0.2}
{"Time":"2026-12-06T10:09:41.6Z","Action":"pass","Package":"q","Elapsed":0.2}
`
	var out strings.Builder
	if code := summarize(strings.NewReader(run), &out, 2); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	got := out.String()
	for _, want := range []string{"b_test.go:3: wrong", "FAIL\tp\t11.0s", "ok  \tq", "The 2 slowest tests:\n       9.5s  TestB p\n       1.5s  TestA p\n",
		"The 2 slowest packages:\n      11.0s  p\n       0.2s  q\n", "The run took 9m42s."} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet a") || strings.Contains(got, "TestB/sub p") {
		t.Errorf("a passing test's output or a subtest listed:\n%s", got)
	}

	out.Reset()
	if code := summarize(strings.NewReader(`{"Action":"pass","Package":"q","Elapsed":0.2}`+"\n"), &out, 10); code != 0 {
		t.Errorf("a passing run: exit %d", code)
	}
	out.Reset()
	if code := summarize(strings.NewReader("# p\n./a.go:1:1: syntax error\n"), &out, 10); code != 1 || !strings.Contains(out.String(), "syntax error") {
		t.Errorf("a build error: exit %d, %q", code, out.String())
	}
}
