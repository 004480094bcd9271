package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"os"
	"strings"
	"testing"
	"time"
)

// tornConn takes limit bytes, then fails the write that goes past them
// as a write past its deadline does, after taking what fits; then it takes
// all again, as a connection does once its client reads on.
type tornConn struct {
	net.Conn
	limit  int
	wrote  bytes.Buffer
	closed bool
}

func (c *tornConn) Write(b []byte) (int, error) {
	n := min(len(b), c.limit-c.wrote.Len())
	c.wrote.Write(b[:n])
	if n < len(b) {
		c.limit = 1 << 30
		return n, os.ErrDeadlineExceeded
	}
	return n, nil
}

func (c *tornConn) SetWriteDeadline(time.Time) error { return nil }
func (c *tornConn) Close() error                     { c.closed = true; return nil }

// TestStreamConnEnd: a stream that took its connection over from net/http
// ends a whole stream with the last chunk, and one whose write failed
// midway with nothing more: the client's reader of chunks then fails, and
// never hands on an event made of the torn chunk and what follows it.
func TestStreamConnEnd(t *testing.T) {
	big := strings.Repeat("word ", 200)
	for _, tc := range []struct {
		name  string
		limit int
		torn  bool
	}{
		{"whole", 1 << 20, false},
		{"torn", 700, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &tornConn{limit: tc.limit}
			s := &sse{conn: &streamConn{conn: c}}
			if err := s.event("progress", "run:1", map[string]string{"delta": "first"}); err != nil {
				t.Fatal(err)
			}
			err := s.event("progress", "run:2", map[string]string{"delta": big})
			if tc.torn != (err != nil) {
				t.Fatalf("the second event: %v", err)
			}
			s.end()
			if !c.closed {
				t.Error("the connection was not closed")
			}
			if tc.torn && c.wrote.Len() != tc.limit {
				t.Errorf("wrote %d bytes, %d before the write that failed: something was written after the torn chunk", c.wrote.Len(), tc.limit)
			}
			body, err := io.ReadAll(httputil.NewChunkedReader(bufio.NewReader(bytes.NewReader(c.wrote.Bytes()))))
			switch {
			case tc.torn && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("reading the torn stream's chunks: %v, want an unexpected end", err)
			case !tc.torn && err != nil:
				t.Errorf("reading the whole stream's chunks: %v", err)
			}
			// An SSE client ends a line at "\r\n" as at "\n".
			events := strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n")
			want := 3 // two events and what follows the last blank line
			if tc.torn {
				want = 2 // the first event, and the second's beginning, not ended
			}
			if len(events) != want || !strings.HasPrefix(events[0], "event: progress\nid: run:1\n") {
				t.Errorf("the client read %d pieces: %q", len(events), body)
			}
		})
	}
}

// TestStreamConnAlive: alive peeks at the connection without waiting: a
// client that is there is alive, one that closed its end is gone, and so
// is a connection closed here.
func TestStreamConnAlive(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	c := &streamConn{conn: server}
	if !c.alive() {
		t.Fatal("a client that sent nothing is taken for gone")
	}
	client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.alive() {
		if time.Now().After(deadline) {
			t.Fatal("a client that closed its end is taken for alive")
		}
		time.Sleep(time.Millisecond)
	}
	server.Close()
	if c.alive() {
		t.Error("a closed connection is taken for alive")
	}
}
