package trace

import (
	"bufio"
	"bytes"
	stdgzip "compress/gzip"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// benchFile returns $FUSEADVISE_BENCH_TRACE (e.g. a 1 GB file from
// go run ./internal/tracegen), or the largest shared trace decompressed into a
// temporary file.
func benchFile(b *testing.B) string {
	if p := os.Getenv("FUSEADVISE_BENCH_TRACE"); p != "" {
		return p
	}
	var src string
	for _, p := range sharedTraces(b) {
		if traceName(p) == "tl_h100_owlv2-large_pt2.6" {
			src = p
		}
	}
	if src == "" {
		b.Skip("owlv2 trace not found")
	}
	data, release, err := readFile(src)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	p := filepath.Join(b.TempDir(), "owlv2.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkOpen measures Open on an uncompressed trace (MB/s over the file size).
func BenchmarkOpen(b *testing.B) {
	p := benchFile(b)
	fi, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenGzip measures Open on a .json.gz trace (MB/s over the
// uncompressed size), and BenchmarkGunzip the decompression alone.
func BenchmarkOpenGzip(b *testing.B) {
	p := gzBenchFile(b)
	data, release, err := readFile(p)
	if err != nil {
		b.Fatal(err)
	}
	n := len(data)
	release()
	b.SetBytes(int64(n))
	for b.Loop() {
		if _, err := Open(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGunzip(b *testing.B) {
	p := gzBenchFile(b)
	data, release, err := readFile(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	release()
	for b.Loop() {
		if _, _, err := readFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGunzipStdlib is the reference: compress/gzip into memory.
func BenchmarkGunzipStdlib(b *testing.B) {
	p := gzBenchFile(b)
	data, release, err := readFile(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	release()
	for b.Loop() {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		zr, err := stdgzip.NewReader(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		buf.Grow(len(data) + bytes.MinRead)
		if _, err := buf.ReadFrom(zr); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

func gzBenchFile(b *testing.B) string {
	if p := os.Getenv("FUSEADVISE_BENCH_TRACE_GZ"); p != "" {
		return p
	}
	for _, p := range sharedTraces(b) {
		if traceName(p) == "tl_h100_owlv2-large_pt2.6" {
			return p
		}
	}
	b.Skip("owlv2 trace not found")
	return ""
}

// BenchmarkParseDoc measures the parallel JSON pass alone (no model building).
func BenchmarkParseDoc(b *testing.B) {
	p := benchFile(b)
	data, release, err := readFile(p)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	b.SetBytes(int64(len(data)))
	s := unsafe.String(unsafe.SliceData(data), len(data))
	b.ResetTimer()
	for b.Loop() {
		if _, err := parseDoc(s); err != nil {
			b.Fatal(err.msg)
		}
	}
}
