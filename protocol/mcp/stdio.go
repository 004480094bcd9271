package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one JSON-RPC message read from a client: a
// longer line (stdio) or body (HTTP) is answered with a JSON-RPC error.
const MaxMessageBytes = 4 << 20

// ServeStdio serves one client over MCP's stdio transport (one JSON-RPC
// message per line) on in and out, usually the process's stdin and stdout,
// until the client leaves (in ends, or out is closed) or ctx is done, which
// are not errors. A line that is not a JSON-RPC message is answered with a
// JSON-RPC error (parse error, invalid request) and the server reads on;
// the SDK's own transport would close the connection.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	err := s.sdk.Run(ctx, &lineTransport{in: in, out: out, log: s.log})
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrClosedPipe), errors.Is(err, syscall.EPIPE):
		return nil // the client left
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return nil
	}
	return err
}

// lineTransport is an sdk.Transport over newline-delimited JSON.
type lineTransport struct {
	in  io.Reader
	out io.Writer
	log *slog.Logger
}

func (t *lineTransport) Connect(context.Context) (sdk.Connection, error) {
	c := &lineConn{out: t.out, log: t.log, incoming: make(chan readResult), closed: make(chan struct{})}
	go c.read(t.in)
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

// lineConn is an sdk.Connection over newline-delimited JSON that answers
// what it cannot read with JSON-RPC errors instead of closing.
type lineConn struct {
	out      io.Writer
	log      *slog.Logger
	wmu      sync.Mutex
	incoming chan readResult
	closed   chan struct{}
	once     sync.Once
}

// read reads lines until in ends (or fails), passing on messages and
// answering the rest. It outlives Close while a read of in blocks (no
// portable way unblocks a read of stdin), and then ends.
func (c *lineConn) read(in io.Reader) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(br, MaxMessageBytes)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			var msg jsonrpc.Message
			if tooLong {
				c.reject(jsonrpc.CodeInvalidRequest, jsonrpc.ID{}, fmt.Sprintf("Invalid Request: a message longer than %d bytes", MaxMessageBytes))
			} else if msg = c.decode(line); msg != nil {
				select {
				case c.incoming <- readResult{msg: msg}:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.EOF
			}
			select {
			case c.incoming <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// readLine reads one line without its end, at most max bytes of it; a
// longer line is consumed to its end and reported as too long.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // +2: the line's end
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// decode returns the message of a line, or answers it with a JSON-RPC error
// and returns nil.
func (c *lineConn) decode(line []byte) jsonrpc.Message {
	msg, code, id, problem := parse(line)
	if msg == nil {
		c.reject(code, id, problem)
	}
	return msg
}

// parse decodes one JSON-RPC message, or says what makes it unreadable:
// not JSON (a parse error), or JSON that is not a JSON-RPC 2.0 request,
// notification or response (an invalid request, with the request's id
// when it has a valid one). A batch (an array) is refused: MCP 2025-06-18
// removed them.
func parse(b []byte) (msg jsonrpc.Message, code int64, id jsonrpc.ID, problem string) {
	b = bytes.TrimSpace(b)
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		if len(b) == 0 {
			err = errors.New("no message")
		}
		return nil, jsonrpc.CodeParseError, id, "Parse error: " + err.Error()
	}
	switch b[0] {
	case '{':
	case '[':
		return nil, jsonrpc.CodeInvalidRequest, id, "Invalid Request: JSON-RPC batches are not supported"
	default:
		return nil, jsonrpc.CodeInvalidRequest, id, "Invalid Request: a JSON-RPC message is an object"
	}
	msg, err := jsonrpc.DecodeMessage(b)
	if err == nil {
		return msg, 0, id, ""
	}
	var probe struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(b, &probe) == nil && probe.ID != nil {
		if v, err := jsonrpc.MakeID(probe.ID); err == nil {
			id = v
		}
	}
	return nil, jsonrpc.CodeInvalidRequest, id, "Invalid Request: " + err.Error()
}

// errorResponse is a JSON-RPC error response; its id is null when the
// request's id is unknown (jsonrpc.EncodeMessage would omit it).
func errorResponse(code int64, id jsonrpc.ID, message string) []byte {
	var rid any
	if id.IsValid() {
		rid = id.Raw()
	}
	b, _ := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: rid, Error: struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	return b
}

// reject answers an unreadable message.
func (c *lineConn) reject(code int64, id jsonrpc.ID, message string) {
	c.log.Warn("mcp: answered an unreadable message with an error", "code", code, "problem", message)
	if err := c.writeLine(errorResponse(code, id, message)); err != nil {
		c.log.Warn("mcp: writing an error response", "err", err)
	}
}

func (c *lineConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.out.Write(append(b, '\n'))
	return err
}

// Read returns the next message.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case r := <-c.incoming:
		return r.msg, r.err
	}
}

// Write writes one message on one line.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(b)
}

// Close stops reading; the output stays open (it is not the connection's).
func (c *lineConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// SessionID is empty: a stdio connection is its own session.
func (c *lineConn) SessionID() string { return "" }

var (
	_ sdk.Transport  = (*lineTransport)(nil)
	_ sdk.Connection = (*lineConn)(nil)
)
