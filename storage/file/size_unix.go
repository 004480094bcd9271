//go:build unix

package file

import (
	"os"
	"syscall"
)

// fileSize returns the size of an open file without allocating (an Append
// asks it every time).
func fileSize(f *os.File) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return st.Size, nil
}
