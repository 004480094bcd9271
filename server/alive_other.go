//go:build !unix

package server

// alive reports whether the client of a stream's connection is still
// there; where a socket cannot be peeked at, it is taken for alive, and
// its client's leaving is seen at the next write.
func (c *streamConn) alive() bool { return true }
