//go:build !unix

package file

import "os"

// fileSize returns the size of an open file.
func fileSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
