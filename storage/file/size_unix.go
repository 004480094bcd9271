//go:build unix

package file

import (
	"os"
	"syscall"
)

// fileSize returns the size of an open file without allocating (an Append
// asks it every time), and whether the file was removed from its directory
// since it was opened (a session deleted by another Store).
func fileSize(f *os.File) (size int64, removed bool, err error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return st.Size, st.Nlink == 0, nil
}
