package host

import (
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"
)

// Smooth streaming: a UI that writes the model's text as it streams shows
// it in bursts, as the provider's chunks come. A [Smoother] paces the text
// (and reasoning) of a run's progress as the AI SDK's smoothStream does:
// it buffers the deltas and lets them out a chunk at a time — a word, a
// line, or what a pattern matches — one chunk per Delay. Any other event
// (a tool call, a retry, the run's end, a snapshot) first lets out what is
// buffered, at once: pacing never delays a tool call or the run's end. The
// ledger keeps the model's own deltas; a smoother only changes what a
// viewer is sent. It keeps no clock: the caller sends a chunk when Delay
// has passed since the last one (see the server's streams), so that tests
// drive it without time.

// DefaultSmoothDelay is SmoothOptions.Delay's default.
const DefaultSmoothDelay = 15 * time.Millisecond

// The chunkings of [SmoothOptions], besides a pattern of one's own.
const (
	// ChunkWord lets a word and the spaces after it out at a time.
	ChunkWord = "word"
	// ChunkLine lets a line out at a time.
	ChunkLine = "line"
)

// SmoothOptions says how a [Smoother] paces text.
type SmoothOptions struct {
	// Delay is the pause between two chunks. Default: 0, which means
	// DefaultSmoothDelay; negative: none (chunks go out as they form).
	Delay time.Duration
	// Chunking is ChunkWord, ChunkLine, or a regular expression (RE2)
	// whose first match in the buffered text ends a chunk: the text up to
	// the match's end goes out. For Japanese or Chinese, one character at
	// a time: `[\p{Han}\p{Hiragana}\p{Katakana}]|\S+\s+`. Default: "",
	// which means ChunkWord.
	Chunking string
}

// The chunkings' patterns.
var (
	wordChunk = regexp.MustCompile(`\S+\s+`)
	lineChunk = regexp.MustCompile(`\n+`)
)

// normalize applies the defaults and compiles the chunking.
func (o SmoothOptions) normalize() (SmoothOptions, *regexp.Regexp, error) {
	if o.Delay == 0 {
		o.Delay = DefaultSmoothDelay
	}
	if o.Delay < 0 {
		o.Delay = 0
	}
	switch o.Chunking {
	case "", ChunkWord:
		o.Chunking = ChunkWord
		return o, wordChunk, nil
	case ChunkLine:
		return o, lineChunk, nil
	}
	re, err := regexp.Compile(o.Chunking)
	if err != nil {
		return o, nil, fmt.Errorf("host: SmoothOptions.Chunking %q: %w", o.Chunking, err)
	}
	if re.MatchString("") {
		return o, nil, errors.New("host: SmoothOptions.Chunking " + fmt.Sprintf("%q", o.Chunking) + " matches nothing: a chunk must hold text")
	}
	return o, re, nil
}

// Smoothed is an event a [Smoother] lets out, with the tag of the last
// event it pushed that the event completes (a viewer's position to resume
// from), if any.
type Smoothed[T any] struct {
	Progress Progress
	Tag      T
	// Tagged is false for a chunk that completes no pushed event: a
	// viewer that reconnects after it resumes from the event before.
	Tagged bool
}

// Smoother paces a run's text for one viewer (see SmoothOptions). T is the
// tag the caller gives each event, such as its cursor. It is not safe for
// concurrent use.
type Smoother[T any] struct {
	opts  SmoothOptions
	chunk *regexp.Regexp

	buf    string   // buffered text of one response's text or reasoning
	first  Progress // the first buffered event: its type, ids and offset
	offset int      // where buf starts in the item, in code points
	seq    int      // the Seq of the last event buffered
	ends   []tagEnd[T]
}

// tagEnd is where a pushed event's text ends in the buffer.
type tagEnd[T any] struct {
	end int // bytes of buf
	seq int
	tag T
}

// NewSmoother returns a smoother that paces text as o says.
func NewSmoother[T any](o SmoothOptions) (*Smoother[T], error) {
	o, re, err := o.normalize()
	if err != nil {
		return nil, err
	}
	return &Smoother[T]{opts: o, chunk: re}, nil
}

// Delay is the pause between two chunks.
func (s *Smoother[T]) Delay() time.Duration { return s.opts.Delay }

// Buffered reports whether text waits to go out.
func (s *Smoother[T]) Buffered() bool { return s.buf != "" }

// Ready reports whether a whole chunk waits: what Next would let out.
func (s *Smoother[T]) Ready() bool {
	m := s.chunk.FindStringIndex(s.buf)
	return m != nil && m[1] > 0
}

// smoothed reports whether p's text is paced.
func smoothed(p *Progress) bool {
	return p != nil && (p.Type == ProgressText || p.Type == ProgressReasoning) && p.Delta != ""
}

// Push takes the next event (nil: a snapshot, or anything else that is not
// a progress event) and returns what goes out at once. Text is buffered:
// nothing, or what was buffered of another response or kind, which goes
// out whole first. Any other event goes out at once, after what was
// buffered.
func (s *Smoother[T]) Push(p *Progress, tag T) []Smoothed[T] {
	if !smoothed(p) {
		out := s.Flush()
		if p != nil {
			out = append(out, Smoothed[T]{Progress: *p, Tag: tag, Tagged: true})
		}
		return out
	}
	var out []Smoothed[T]
	if s.buf != "" && (p.ResponseID != s.first.ResponseID || p.Type != s.first.Type || p.RunID != s.first.RunID ||
		p.Offset != s.offset+utf8.RuneCountInString(s.buf)) {
		out = s.Flush()
	}
	if s.buf == "" {
		s.first, s.offset = *p, p.Offset
	}
	s.buf += p.Delta
	s.seq = p.Seq
	s.ends = append(s.ends, tagEnd[T]{end: len(s.buf), seq: p.Seq, tag: tag})
	return out
}

// Next returns the next chunk of the buffered text, when a whole one is
// buffered; the caller sends it, and asks again after Delay.
func (s *Smoother[T]) Next() (Smoothed[T], bool) {
	m := s.chunk.FindStringIndex(s.buf)
	if m == nil || m[1] == 0 {
		return Smoothed[T]{}, false
	}
	return s.take(m[1]), true
}

// Flush lets out what is buffered, at once: its whole chunks one by one
// (so that where chunks end does not depend on when the flush came), then
// the rest; nothing when nothing is.
func (s *Smoother[T]) Flush() []Smoothed[T] {
	var out []Smoothed[T]
	for {
		o, ok := s.Next()
		if !ok {
			break
		}
		out = append(out, o)
	}
	if s.buf != "" {
		out = append(out, s.take(len(s.buf)))
	}
	return out
}

// take lets out the first n bytes of the buffer.
func (s *Smoother[T]) take(n int) Smoothed[T] {
	text := s.buf[:n]
	p := s.first
	p.Delta, p.Offset = text, s.offset
	out := Smoothed[T]{Progress: p}
	// The chunk completes the pushed events whose text ends within it:
	// it carries the last one's tag and Seq; else the Seq of the event
	// it ends in.
	done := 0
	for done < len(s.ends) && s.ends[done].end <= n {
		out.Tag, out.Progress.Seq, out.Tagged = s.ends[done].tag, s.ends[done].seq, true
		done++
	}
	if !out.Tagged && done < len(s.ends) {
		out.Progress.Seq = s.ends[done].seq
	}
	s.ends = s.ends[done:]
	for i := range s.ends {
		s.ends[i].end -= n
	}
	s.buf = s.buf[n:]
	s.offset += utf8.RuneCountInString(text)
	return out
}
