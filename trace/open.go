package trace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/gzip"
)

// Load reads a trace file, or every rank file in a directory (see OpenDir).
func Load(path string) ([]*Trace, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Path: path, Offset: -1, Msg: errMsg(err)}
	}
	if fi.IsDir() {
		return OpenDir(path)
	}
	t, err := Open(path)
	if err != nil {
		return nil, err
	}
	return []*Trace{t}, nil
}

func errMsg(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// Open reads one Kineto trace: a .json or .json.gz file holding a JSON object with
// a traceEvents array, or the legacy top-level array form.
func Open(path string) (*Trace, error) {
	data, release, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, release)
}

// parse builds a Trace from the JSON text. release (if not nil) is called as soon
// as the text is no longer needed, before the model is built: the parser copies
// every string it keeps.
func parse(path string, data []byte, release func()) (*Trace, error) {
	s := unsafe.String(unsafe.SliceData(data), len(data))
	raw, serr := parseDoc(s)
	if release != nil {
		release()
	}
	if serr != nil {
		return nil, &Error{Path: path, Offset: int64(serr.off), Msg: serr.msg}
	}
	t, msg := build(raw)
	if msg != "" {
		return nil, &Error{Path: path, Offset: -1, Msg: msg}
	}
	t.Path = path
	return t, nil
}

// readFile maps an uncompressed file or decompresses a gzip file into memory.
// release unmaps.
func readFile(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, &Error{Path: path, Offset: -1, Msg: errMsg(err)}
	}
	defer f.Close()
	var magic [2]byte
	n, _ := io.ReadFull(f, magic[:])
	if n == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		data, free, err := gunzip(f)
		if err != nil {
			return nil, nil, &Error{Path: path, Offset: -1, Msg: "gzip: " + err.Error()}
		}
		return data, free, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, &Error{Path: path, Offset: -1, Msg: errMsg(err)}
	}
	if fi.Size() == 0 {
		return nil, nil, &Error{Path: path, Offset: 0, Msg: "empty file"}
	}
	data, unmap, err := mapFile(f, fi.Size())
	if err != nil {
		// Fall back to reading it.
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			return nil, nil, &Error{Path: path, Offset: -1, Msg: errMsg(serr)}
		}
		data, err = io.ReadAll(f)
		if err != nil {
			return nil, nil, &Error{Path: path, Offset: -1, Msg: errMsg(err)}
		}
		return data, func() {}, nil
	}
	return data, unmap, nil
}

// gunzip decompresses all members of a gzip stream into memory outside the Go
// heap (free releases it), presizing the buffer from the ISIZE trailer (a hint
// only: it is the size mod 2^32).
func gunzip(f *os.File) (data []byte, free func(), err error) {
	var hint int64
	if fi, err := f.Stat(); err == nil && fi.Size() >= 18 {
		var tail [4]byte
		if _, err := f.ReadAt(tail[:], fi.Size()-4); err == nil {
			hint = int64(binary.LittleEndian.Uint32(tail[:]))
			if hint < fi.Size() {
				hint = fi.Size() * 8
			}
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	defer zr.Close()
	buf, free, err := anonMap(int(hint) + 1<<16)
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for {
		if n == len(buf) {
			// The hint was wrong (over 4 GiB, or several members): grow.
			bigger, freeBigger, err := anonMap(2 * len(buf))
			if err != nil {
				free()
				return nil, nil, err
			}
			copy(bigger, buf)
			free()
			buf, free = bigger, freeBigger
		}
		m, err := zr.Read(buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			free()
			return nil, nil, err
		}
	}
	if n == 0 {
		free()
		return nil, nil, errors.New("empty file")
	}
	return buf[:n], free, nil
}

// OpenDir reads the rank files of a directory concurrently: *.pt.trace.json[.gz]
// and any other *.json[.gz] whose beginning mentions traceEvents; execution
// traces (*.et.json[.gz]) are skipped. Traces are sorted by rank (unknown ranks
// last), then path. Several files must be the ranks of one job (CheckJob).
func OpenDir(dir string) ([]*Trace, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &Error{Path: dir, Offset: -1, Msg: errMsg(err)}
	}
	var paths []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || isETName(n) {
			continue
		}
		p := filepath.Join(dir, n)
		switch {
		case strings.HasSuffix(n, ".pt.trace.json"), strings.HasSuffix(n, ".pt.trace.json.gz"):
			paths = append(paths, p)
		case strings.HasSuffix(n, ".json"), strings.HasSuffix(n, ".json.gz"):
			if hasTraceEvents(p) {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) == 0 {
		return nil, &Error{Path: dir, Offset: -1, Msg: "no trace files (*.pt.trace.json[.gz] or *.json[.gz] with traceEvents)"}
	}
	traces := make([]*Trace, len(paths))
	errs := make([]error, len(paths))
	// Files are parsed in parallel internally; run a few at a time.
	sem := make(chan struct{}, max(1, min(len(paths), runtime.GOMAXPROCS(0))))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			traces[i], errs[i] = Open(p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(traces, func(i, j int) bool {
		ri, rj := traces[i].Rank, traces[j].Rank
		if ri != rj {
			if ri < 0 || rj < 0 {
				return rj < 0
			}
			return ri < rj
		}
		return traces[i].Path < traces[j].Path
	})
	if err := CheckJob(traces); err != nil {
		return nil, err
	}
	return traces, nil
}

func isETName(n string) bool {
	return strings.HasSuffix(n, ".et.json") || strings.HasSuffix(n, ".et.json.gz")
}

// hasTraceEvents reports whether the first MiB (decompressed) of the file
// contain "traceEvents" or the file starts with a JSON array.
func hasTraceEvents(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	br := r.(*bufio.Reader)
	if m, err := br.Peek(2); err == nil && m[0] == 0x1f && m[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return false
		}
		defer zr.Close()
		r = zr
	}
	head := make([]byte, 1<<20)
	n, _ := io.ReadFull(r, head)
	head = head[:n]
	if bytes.Contains(head, []byte(`"traceEvents"`)) {
		return true
	}
	t := bytes.TrimLeft(head, " \t\r\n\xef\xbb\xbf")
	return len(t) > 0 && t[0] == '['
}
