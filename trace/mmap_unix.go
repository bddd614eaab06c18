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

// anonMap allocates n bytes outside the Go heap; free unmaps them. Used for
// decompressed traces, so that their memory is returned as soon as parsing ends
// rather than at a later garbage collection.
func anonMap(n int) ([]byte, func(), error) {
	data, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { _ = syscall.Munmap(data) }, nil
}
