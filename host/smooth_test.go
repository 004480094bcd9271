package host_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
)

// at is an event at a virtual time.
type at struct {
	t time.Duration
	p *host.Progress
}

func text(seq, offset int, delta string) *host.Progress {
	return &host.Progress{Seq: seq, Type: host.ProgressText, RunID: "run_1", ResponseID: "resp_1", Delta: delta, Offset: offset}
}

// pace plays events through a smoother on a virtual clock, as a stream
// does: a chunk at once when none went out for a Delay, else when Delay
// has passed since the last; any other event flushes. It returns what
// went out, each line "TIME TYPE DELTA [seq N] [tag]".
func pace(t *testing.T, opts host.SmoothOptions, events []at) []string {
	t.Helper()
	s, err := host.NewSmoother[int](opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var now time.Duration
	last := -time.Hour // when the last chunk went out
	emit := func(o host.Smoothed[int]) {
		line := fmt.Sprintf("%s %s %q seq %d", now, o.Progress.Type, o.Progress.Delta, o.Progress.Seq)
		if o.Tagged {
			line += fmt.Sprintf(" tag %d", o.Tag)
		}
		if o.Progress.Type == host.ProgressText {
			line += fmt.Sprintf(" @%d", o.Progress.Offset)
		}
		out = append(out, line)
	}
	drain := func(until time.Duration) {
		for s.Buffered() {
			next := max(now, last+s.Delay())
			if next > until {
				return
			}
			now = next
			o, ok := s.Next()
			if !ok {
				return
			}
			emit(o)
			last = now
		}
	}
	for i, e := range events {
		drain(e.t)
		now = e.t
		for _, o := range s.Push(e.p, i) {
			emit(o)
			if o.Progress.Type == host.ProgressText {
				last = now
			}
		}
		drain(e.t)
	}
	drain(time.Hour)
	return out
}

// TestSmoothWords: text goes out a word (and its spaces) at a time, a
// Delay apart, each at its offset; the chunk that completes a pushed event
// carries its tag (a viewer's place to come back to); a tool call does not
// wait for the text before it — the rest goes out at once, in the same
// chunks, then the call —
// and neither does the run's end, which lets out text still paced.
func TestSmoothWords(t *testing.T) {
	tool := &host.Progress{Seq: 4, Type: host.ProgressToolStart, RunID: "run_1", ResponseID: "resp_1"}
	end := &host.Progress{Seq: 6, Type: host.ProgressRunEnd, RunID: "run_1"}
	got := pace(t, host.SmoothOptions{}, []at{
		{0, text(1, 0, "Hello wor")},
		{1 * time.Millisecond, text(2, 9, "ld, how are")},
		{2 * time.Millisecond, text(3, 20, " you today? Fine")},
		{40 * time.Millisecond, tool},
		{41 * time.Millisecond, text(5, 36, "Done. ")},
		{42 * time.Millisecond, end},
	})
	want := []string{
		`0s text "Hello " seq 1 @0`,
		`15ms text "world, " seq 1 tag 0 @6`,
		`30ms text "how " seq 2 @13`,
		`40ms text "are " seq 2 tag 1 @17`,
		`40ms text "you " seq 3 @21`,
		`40ms text "today? " seq 3 @25`,
		`40ms text "Fine" seq 3 tag 2 @32`,
		`40ms tool-start "" seq 4 tag 3`,
		`42ms text "Done. " seq 5 tag 4 @36`, // a Delay after the last chunk, but the run's end does not wait
		`42ms run-end "" seq 6 tag 5`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("paced:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSmoothJapanese: with a pattern that cuts one kana or kanji at a
// time (and a word with its spaces otherwise), Japanese text goes out a
// character a Delay; the offsets count code points.
func TestSmoothJapanese(t *testing.T) {
	got := pace(t, host.SmoothOptions{Delay: 10 * time.Millisecond, Chunking: `[\p{Han}\p{Hiragana}\p{Katakana}]|\S+\s+`}, []at{
		{0, text(1, 0, "こんにち")},
		{1 * time.Millisecond, text(2, 4, "は世界。ok ")},
		{100 * time.Millisecond, &host.Progress{Seq: 3, Type: host.ProgressRunEnd}},
	})
	want := []string{
		`0s text "こ" seq 1 @0`, `10ms text "ん" seq 1 @1`, `20ms text "に" seq 1 @2`, `30ms text "ち" seq 1 tag 0 @3`,
		`40ms text "は" seq 2 @4`, `50ms text "世" seq 2 @5`, `60ms text "界" seq 2 @6`, `70ms text "。ok " seq 2 tag 1 @7`,
		`100ms run-end "" seq 3 tag 2`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("paced:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSmoothLines: by line, text goes out up to each newline; what has
// no newline yet waits, and goes out whole before the next event of
// another kind (reasoning, here) or response.
func TestSmoothLines(t *testing.T) {
	reasoning := &host.Progress{Seq: 3, Type: host.ProgressReasoning, RunID: "run_1", ResponseID: "resp_2", Delta: "hmm\n"}
	got := pace(t, host.SmoothOptions{Delay: -1, Chunking: host.ChunkLine}, []at{
		{0, text(1, 0, "one\ntwo\n\nthr")},
		{5 * time.Millisecond, text(2, 12, "ee")},
		{6 * time.Millisecond, reasoning},
	})
	want := []string{
		`0s text "one\n" seq 1 @0`, `0s text "two\n\n" seq 1 @4`,
		`6ms text "three" seq 2 tag 1 @9`, `6ms reasoning "hmm\n" seq 3 tag 2`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("paced:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSmoothOptions: a pattern that does not compile, or that matches
// nothing (a chunk of no text), is refused.
func TestSmoothOptions(t *testing.T) {
	for _, c := range []string{"(", "x*"} {
		if _, err := host.NewSmoother[int](host.SmoothOptions{Chunking: c}); err == nil {
			t.Errorf("chunking %q was taken", c)
		}
	}
	s, err := host.NewSmoother[int](host.SmoothOptions{})
	if err != nil || s.Delay() != host.DefaultSmoothDelay {
		t.Errorf("the defaults: %v %v", s, err)
	}
}
