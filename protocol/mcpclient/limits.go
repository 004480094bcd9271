package mcpclient

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
)

// The bounds' defaults.
const (
	// DefaultMaxMessageBytes is Server.MaxMessageBytes's default: 4 MiB.
	DefaultMaxMessageBytes = 4 << 20
	// DefaultMaxTools is Server.MaxTools's default: 128, the most tools
	// some providers take in one request.
	DefaultMaxTools = 128
	// DefaultMaxDefinitionBytes is Server.MaxDefinitionBytes's default:
	// 32 KiB.
	DefaultMaxDefinitionBytes = 32 << 10
)

// LimitError is a bound of a [Server] a server went past: an answer
// larger than MaxMessageBytes ([ErrTooLarge]) or a listing of more than
// MaxTools tools ([ErrTooManyTools]).
type LimitError struct {
	// Server is the server's name.
	Server string
	// What went past the bound: "a JSON answer", "an SSE event", "a line
	// of the command's output", "a listing" (of tools).
	What string
	// Field is the Server field that sets the bound ("MaxMessageBytes",
	// "MaxTools"), Max its value.
	Field string
	Max   int
}

func (e *LimitError) Error() string {
	unit := " bytes"
	if e.Field == "MaxTools" {
		unit = " tools"
	}
	return fmt.Sprintf("%v: server %s: %s of more than %d%s (the bound, %s): refused", e.Unwrap(), e.Server, e.What, e.Max, unit, e.Field)
}

// Unwrap is the sentinel of the bound: ErrTooLarge or ErrTooManyTools.
func (e *LimitError) Unwrap() error {
	if e.Field == "MaxTools" {
		return ErrTooManyTools
	}
	return ErrTooLarge
}

// overflow records the first message of a connection refused as too
// large: the SDK reports the failure of the connection in words, and the
// calls that fail with it are told why by this.
type overflow struct {
	server string
	max    int
	err    atomic.Pointer[LimitError]
}

// refuse records that what went past the bound and returns the error.
func (o *overflow) refuse(what string) error {
	o.err.CompareAndSwap(nil, &LimitError{Server: o.server, What: what, Field: "MaxMessageBytes", Max: o.max})
	return o.err.Load()
}

// get is the error recorded, nil when none is.
func (o *overflow) get() error {
	if e := o.err.Load(); e != nil {
		return e
	}
	return nil
}

// boundedTransport bounds the response bodies next gives: a JSON answer
// (any body that is not an event stream) to o.max bytes, each event of an
// event stream to o.max bytes (counted as the SDK's decoder counts them,
// whose bound is the same: its lines, the blank line ending it included).
type boundedTransport struct {
	next http.RoundTripper
	o    *overflow
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil || res.Body == nil {
		return res, err
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	res.Body = &boundedBody{ReadCloser: res.Body, o: t.o, sse: mt == "text/event-stream", blank: true}
	return res, nil
}

// boundedBody is a response body read within the bound. It never reads
// more than one byte past it.
type boundedBody struct {
	io.ReadCloser
	o     *overflow
	sse   bool
	n     int  // bytes of the body (JSON) or of the event under way (SSE)
	blank bool // SSE: the line under way is blank so far
	err   error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if room := b.o.max + 1 - b.n; len(p) > room {
		p = p[:room] // read at most up to the first byte past the bound
	}
	n, err := b.ReadCloser.Read(p)
	if !b.sse {
		b.n += n
		if b.n > b.o.max {
			b.err = b.o.refuse("a JSON answer")
			return n, nil // the bytes read, then the error
		}
		return n, err
	}
	for i, c := range p[:n] {
		b.n++
		if b.n > b.o.max {
			// The SDK's decoder, bound alike, refuses the event when it
			// reads this byte; the rest is not given.
			b.err = b.o.refuse("an SSE event")
			return i + 1, nil
		}
		switch c {
		case '\n':
			if b.blank {
				b.n = 0 // the event ended
			}
			b.blank = true
		case '\r':
		default:
			b.blank = false
		}
	}
	return n, err
}

// lineBound bounds each line of a local server's output (one message) to
// o.max bytes, its newline included. Past the bound it closes r, so that
// the server, writing still, ends (SIGPIPE) rather than waits for a reader.
type lineBound struct {
	r   io.ReadCloser
	o   *overflow
	n   int // bytes of the line under way
	err error
}

func (l *lineBound) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if room := l.o.max + 1 - l.n; len(p) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	for i, c := range p[:n] {
		l.n++
		if l.n > l.o.max {
			l.err = l.o.refuse("a line of the command's output")
			l.r.Close()
			return i, l.err
		}
		if c == '\n' {
			l.n = 0
		}
	}
	return n, err
}
