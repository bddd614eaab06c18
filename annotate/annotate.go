// Package annotate writes a copy of a profiler trace with the chains the analysis
// found marked for Perfetto and chrome://tracing: one slice per chain instance on a
// track of its own (process "fuseadvise", a thread per pattern) spanning the chain's
// ops, and a flow arrow from each slice to the chain's first op.
//
// Every event of the original file is copied as it was written; the marks are
// appended to traceEvents. Their names and args come from the analysis only
// (catalog pattern ids and numbers), never from the trace.
package annotate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/fuseadvise/fuseadvise/internal/safefile"
	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/trace"
)

// flowBase offsets the ids of the flows added, away from Kineto's own (correlation ids).
const flowBase = 1 << 40

// Options select what is marked, as analyze's flags of the same names.
type Options struct {
	Pattern string // only this pattern id; "" for all
	ET      string // the execution trace file of a single trace, for exact dataflow; "" for none
}

// Write marks the chains of traces (as trace.Load read them from input) in copies of
// their files: out is a file for a single trace (gzipped when it ends in .gz), or a
// folder that gets one file per rank, named as the rank's file, for a rank folder.
func Write(out, input string, traces []*trace.Trace, o Options) error {
	opts := patterns.Options{Pattern: o.Pattern}
	if o.ET != "" && len(traces) == 1 {
		et, err := trace.ReadET(o.ET)
		if err != nil {
			return err
		}
		opts.ET = map[*trace.Trace]*trace.ExecTrace{traces[0]: et}
	}
	marks, err := patterns.Marks(traces, opts)
	if err != nil {
		return fmt.Errorf("%s: %v", input, err)
	}
	fi, err := os.Stat(input)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if len(traces) != 1 {
			return fmt.Errorf("%s: %d traces in one file", input, len(traces))
		}
		return safefile.Write(out, func(w io.Writer) error {
			return writeGzipIf(w, strings.HasSuffix(out, ".gz"), func(w io.Writer) error {
				return copyMarked(w, traces[0], marks[0])
			})
		})
	}
	return safefile.Dir(out, false, func(dir string) error {
		seen := map[string]bool{}
		for i, t := range traces {
			name := filepath.Base(t.Path)
			if seen[name] {
				return fmt.Errorf("%s: two rank files named %s", input, name)
			}
			seen[name] = true
			err := safefile.Write(filepath.Join(dir, name), func(w io.Writer) error {
				return writeGzipIf(w, isGzip(t.Path), func(w io.Writer) error { return copyMarked(w, t, marks[i]) })
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func writeGzipIf(w io.Writer, gz bool, fill func(io.Writer) error) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if !gz {
		if err := fill(bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	zw := gzip.NewWriter(bw)
	if err := fill(zw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func isGzip(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [2]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && magic == [2]byte{0x1f, 0x8b}
}

// open reads path, gunzipping it when it is gzip.
func open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %v", path, err)
		}
		return struct {
			io.Reader
			io.Closer
		}{zr, f}, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{br, f}, nil
}

// copyMarked copies t's file to w, top-level keys in their order and every event as
// written, with the marks appended to traceEvents (or to the array of the legacy form).
func copyMarked(w io.Writer, t *trace.Trace, marks []patterns.Mark) error {
	r, err := open(t.Path)
	if err != nil {
		return err
	}
	defer r.Close()
	bad := func(err error) error {
		return fmt.Errorf("%s: not a trace this can annotate: %v", t.Path, err)
	}
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return bad(err)
	}
	pids := map[int64]bool{}
	switch tok {
	case json.Delim('['):
		if err := copyEvents(w, dec, t, marks, pids); err != nil {
			return bad(err)
		}
	case json.Delim('{'):
		io.WriteString(w, "{")
		found := false
		for n := 0; dec.More(); n++ {
			k, err := dec.Token()
			if err != nil {
				return bad(err)
			}
			key, _ := k.(string)
			if n > 0 {
				io.WriteString(w, ",")
			}
			kb, _ := json.Marshal(key)
			w.Write(append(kb, ':'))
			if key == "traceEvents" && !found {
				found = true
				if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
					return bad(errors.New("traceEvents is not an array"))
				}
				if err := copyEvents(w, dec, t, marks, pids); err != nil {
					return bad(err)
				}
				continue
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return bad(err)
			}
			w.Write(v)
		}
		if !found {
			return bad(errors.New("no traceEvents array"))
		}
		if _, err := dec.Token(); err != nil {
			return bad(err)
		}
		io.WriteString(w, "}")
	default:
		return bad(errors.New("not a JSON object or array"))
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// copyEvents copies the events of an array whose '[' dec has read, then appends the
// marks' events and closes the array.
func copyEvents(w io.Writer, dec *json.Decoder, t *trace.Trace, marks []patterns.Mark, pids map[int64]bool) error {
	io.WriteString(w, "[")
	n := 0
	for ; dec.More(); n++ {
		var ev json.RawMessage
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		if n > 0 {
			io.WriteString(w, ",")
		}
		io.WriteString(w, "\n")
		w.Write(ev)
		var p struct{ Pid json.RawMessage }
		if json.Unmarshal(ev, &p) == nil {
			if v, err := strconv.ParseInt(string(bytes.Trim(p.Pid, `"`)), 10, 64); err == nil {
				pids[v] = true
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	for _, ev := range markEvents(t, marks, pids) {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if n > 0 {
			io.WriteString(w, ",")
		}
		n++
		io.WriteString(w, "\n")
		w.Write(b)
	}
	_, err := io.WriteString(w, "\n]")
	return err
}

// event is a Chrome trace event; fields left zero are omitted.
type event struct {
	Ph   string         `json:"ph"`
	Cat  string         `json:"cat,omitempty"`
	Name string         `json:"name"`
	Pid  any            `json:"pid"`
	Tid  any            `json:"tid"`
	Ts   json.Number    `json:"ts,omitempty"`
	Dur  json.Number    `json:"dur,omitempty"`
	ID   int64          `json:"id,omitempty"`
	Bp   string         `json:"bp,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// markEvents returns the events that mark the chains: the track's metadata, then per
// instance its slice, the flow's start on it and the flow's end on the chain's first op.
func markEvents(t *trace.Trace, marks []patterns.Mark, pids map[int64]bool) []event {
	if len(marks) == 0 {
		return nil
	}
	pid := int64(1)
	for p := range pids {
		pid = max(pid, p+1)
	}
	var ids []string
	for _, m := range marks {
		if !slices.Contains(ids, m.Pattern) {
			ids = append(ids, m.Pattern)
		}
	}
	slices.Sort(ids)
	evs := []event{{Ph: "M", Name: "process_name", Pid: pid, Tid: 0, Args: map[string]any{"name": "fuseadvise"}}}
	for i, id := range ids {
		evs = append(evs, event{Ph: "M", Name: "thread_name", Pid: pid, Tid: i + 1, Args: map[string]any{"name": id}})
	}
	for k, m := range marks {
		tid := slices.Index(ids, m.Pattern) + 1
		ts := micros(m.Start - t.BaseTimeNs)
		evs = append(evs, event{Ph: "X", Cat: "fuseadvise", Name: m.Pattern + " #" + strconv.Itoa(m.N), Pid: pid, Tid: tid,
			Ts: ts, Dur: micros(max(m.End-m.Start, 0)),
			Args: map[string]any{"pattern": m.Pattern, "instance": m.N, "est_saving_us": m.SavingUs, "counted": m.Counted}})
		id := flowBase + int64(k)
		evs = append(evs, event{Ph: "s", Cat: "fuseadvise", Name: "chain", Pid: pid, Tid: tid, Ts: ts, ID: id})
		op := &t.Ops[m.FirstOp]
		th := &t.Threads[op.Thread]
		evs = append(evs, event{Ph: "f", Bp: "e", Cat: "fuseadvise", Name: "chain", Pid: idValue(th.Pid), Tid: idValue(th.Tid),
			Ts: micros(op.Start - t.BaseTimeNs), ID: id})
	}
	return evs
}

// micros writes ns as the file's microseconds, exactly (at most three decimals).
func micros(ns int64) json.Number {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	s := fmt.Sprintf("%s%d.%03d", sign, ns/1000, ns%1000)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		s = "0"
	}
	return json.Number(s)
}

// idValue writes a pid or tid as the trace had it: a number when it is one, else a string.
func idValue(s string) any {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v
	}
	return s
}
