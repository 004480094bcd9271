//go:build unix

package server

import (
	"errors"
	"syscall"
)

// alive reports whether the client of a stream's connection is still
// there, without waiting and without taking anything it sent: a
// connection the client closed (or reset) reads its end at once. A
// connection whose socket cannot be peeked at is taken for alive: its
// client's leaving is seen at the next write.
func (c *streamConn) alive() bool {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false // closed
	}
	gone := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				// Nothing to read: still there.
			case err != nil || n == 0:
				gone = true // reset, or the client's end
			}
			return true // never wait for the connection
		}
	})
	return err == nil && !gone
}
