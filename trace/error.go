package trace

import (
	"fmt"
	"strings"
)

// Error is a problem with one trace file. Offset is the byte offset in the
// (decompressed) JSON text where it was found, -1 when unknown.
type Error struct {
	Path   string
	Offset int64
	Msg    string
}

func (e *Error) Error() string {
	msg := strings.ReplaceAll(e.Msg, "\n", " ")
	if e.Offset < 0 {
		return e.Path + ": " + msg
	}
	return fmt.Sprintf("%s: offset %d: %s", e.Path, e.Offset, msg)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
