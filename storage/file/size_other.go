//go:build !unix

package file

import "os"

// fileSize returns the size of an open file, and whether the file was
// removed from its directory since it was opened (a session deleted by
// another Store): compared by name, since the link count is not portable.
func fileSize(f *os.File) (size int64, removed bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	named, err := os.Stat(f.Name())
	return fi.Size(), err != nil || !os.SameFile(fi, named), nil
}
