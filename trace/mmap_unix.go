//go:build unix

package trace

import (
	"os"
	"syscall"
)

// mapFile maps the whole file read-only; unmap releases it.
func mapFile(f *os.File, size int64) ([]byte, func(), error) {
	if int64(int(size)) != size {
		return nil, nil, syscall.EFBIG
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	_ = syscall.Madvise(data, syscall.MADV_SEQUENTIAL)
	return data, func() { _ = syscall.Munmap(data) }, nil
}
