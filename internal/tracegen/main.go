package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/internal/shared"
)

func main() {
	out := flag.String("o", "", "output file (required)")
	size := flag.String("size", "1GB", "minimum output size (e.g. 200MB, 1GB, 2GiB)")
	src := flag.String("src", "", "source trace (default: the shared h200 gpt2_train_sdpa_stack trace)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *size, *src); err != nil {
		fmt.Fprintln(os.Stderr, "tracegen:", err)
		os.Exit(1)
	}
}

func run(out, sizeText, src string) error {
	size, err := parseSize(sizeText)
	if err != nil {
		return err
	}
	if src == "" {
		if src, err = shared.Path("traces", "h200", "gpt2_train_sdpa_stack.json.gz"); err != nil {
			return err
		}
	}
	tmpl, err := load(src)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	n, err := tmpl.generate(w, size)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tracegen: wrote %s: %d bytes, %d events\n", out, n.bytes, n.events)
	return nil
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("bad size %q", s)
			}
			return int64(v * float64(u.mult)), nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v, nil
}

// A template is the source trace split into literal text and numeric holes.
type template struct {
	header []byte  // top-level metadata, up to and including `"traceEvents": [`
	events []event // one per source event
	spanUs int64   // time shift per replica (µs)
	idSpan int64   // id shift per replica
}

type event struct {
	parts []string // literal text around the holes: len(parts) == len(holes)+1
	holes []hole
}

type hole struct {
	ts   bool   // a timestamp (shifted by spanUs) rather than an id (shifted by idSpan)
	ip   int64  // integer part
	frac string // fraction text including '.', or ""
}

var numField = regexp.MustCompile(`"(ts|correlation|External id|external id|id|Record function id|Ev Idx|Sequence number|Python id|Python parent id)": ?(-?\d+)(\.\d+)?`)

func load(path string) (*template, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	var doc map[string]json.RawMessage
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(doc["traceEvents"], &raws); err != nil || len(raws) == 0 {
		return nil, errors.New(path + ": no traceEvents")
	}
	t := &template{}
	var hdr strings.Builder
	hdr.WriteString("{\n  \"schemaVersion\": 1")
	for _, k := range []string{"deviceProperties", "record_shapes", "with_stack", "displayTimeUnit", "baseTimeNanoseconds"} {
		if v, ok := doc[k]; ok {
			fmt.Fprintf(&hdr, ",\n  %q: %s", k, v)
		}
	}
	hdr.WriteString(",\n  \"traceEvents\": [")
	t.header = []byte(hdr.String())
	lo, hi := int64(1<<62), int64(-1<<62)
	for _, raw := range raws {
		text := strings.TrimSpace(string(raw))
		var e event
		last := 0
		for _, m := range numField.FindAllStringSubmatchIndex(text, -1) {
			key := text[m[2]:m[3]]
			ip, err := strconv.ParseInt(text[m[4]:m[5]], 10, 64)
			if err != nil {
				continue
			}
			h := hole{ts: key == "ts", ip: ip}
			if m[6] >= 0 {
				h.frac = text[m[6]:m[7]]
			}
			if h.ts {
				lo, hi = min(lo, ip), max(hi, ip)
			} else {
				t.idSpan = max(t.idSpan, ip+1)
			}
			e.parts = append(e.parts, text[last:m[4]])
			e.holes = append(e.holes, h)
			last = m[1]
		}
		e.parts = append(e.parts, text[last:])
		t.events = append(t.events, e)
	}
	// Durations can run past the last start: leave a generous gap between replicas.
	t.spanUs = (hi-lo)*2 + 1000
	return t, nil
}

type counts struct{ bytes, events int64 }

func (t *template) generate(w *bufio.Writer, size int64) (counts, error) {
	var n counts
	write := func(s string) {
		w.WriteString(s)
		n.bytes += int64(len(s))
	}
	w.Write(t.header)
	n.bytes += int64(len(t.header))
	var buf []byte
	for k := int64(0); n.bytes < size || k == 0; k++ {
		for i, e := range t.events {
			if k == 0 && i == 0 {
				write("\n  ")
			} else {
				write(",\n  ")
			}
			for j, h := range e.holes {
				write(e.parts[j])
				v := h.ip
				if h.ts {
					v += k * t.spanUs
				} else if v > 0 {
					v += k * t.idSpan
				}
				buf = strconv.AppendInt(buf[:0], v, 10)
				buf = append(buf, h.frac...)
				w.Write(buf)
				n.bytes += int64(len(buf))
			}
			write(e.parts[len(e.parts)-1])
			n.events++
		}
	}
	write("\n  ],\n  \"traceName\": \"tracegen\"\n}\n")
	return n, nil
}
