//go:build !unix

package server

// openFileLimit returns 0: the limit is not known here.
func openFileLimit() int { return 0 }
