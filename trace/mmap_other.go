//go:build !unix

package trace

import (
	"errors"
	"os"
)

func mapFile(f *os.File, size int64) ([]byte, func(), error) {
	return nil, nil, errors.New("mmap not supported")
}

func anonMap(n int) ([]byte, func(), error) {
	return make([]byte, n), func() {}, nil
}
