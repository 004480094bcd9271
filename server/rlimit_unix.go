//go:build unix

package server

import "syscall"

// openFileLimit returns the process's limit on open file descriptors
// (RLIMIT_NOFILE, soft); 0 when it cannot tell.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
