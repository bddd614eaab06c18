// This file compares the hand-written scanner with github.com/tidwall/gjson on the
// parser's own work. Its leading underscore keeps it out of every build and out of
// go mod tidy, so gjson is not a dependency of the module; scripts/bench-gjson.sh adds it
// to the package through -overlay, with gjson in a temporary copy of go.mod.
// docs/architecture.md (Dependencies) has the numbers.

package trace

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/tidwall/gjson"
)

// gjsonEvents reads the traceEvents of s with gjson the fast way (zero-copy string, one
// ForEach over each event's keys and one over its args, no Get per field) into the same
// event struct, and builds the same records (chunk.add) as the scanner.
func gjsonEvents(s string) *chunk {
	c := newChunk(len(s))
	sc := &scanner{s: s}
	var e event
	str := func(v gjson.Result) string {
		if v.Type == gjson.String {
			return v.Str
		}
		return v.Raw
	}
	num := func(v gjson.Result) int64 {
		switch v.Type {
		case gjson.Number:
			if x, ok := parseInt(v.Raw); ok {
				return x
			}
			return -1
		case gjson.Null:
			return -1
		}
		c.warn.badArgs++
		return -1
	}
	dim3 := func(v gjson.Result) (d [3]int32) {
		i := 0
		v.ForEach(func(_, x gjson.Result) bool {
			if n := num(x); i < 3 && n >= 0 && n < 1<<31 {
				d[i] = int32(n)
			}
			i++
			return true
		})
		return d
	}
	args := func(k, v gjson.Result) bool {
		switch k.Str {
		case "External id", "external id":
			e.ext = num(v)
		case "correlation":
			e.corr = num(v)
		case "Record function id":
			e.rf = num(v)
		case "Ev Idx", "Profiler Event Index":
			e.ev = num(v)
		case "Sequence number":
			e.seq = num(v)
		case "Fwd thread id":
			e.fwd = num(v)
		case "stream":
			e.stream = num(v)
		case "device":
			e.device = num(v)
		case "bytes":
			e.bytes = num(v)
		case "Python id":
			e.pyID = num(v)
		case "Python parent id":
			e.pyParent = num(v)
		case "grid":
			e.grid = dim3(v)
		case "block":
			e.block = dim3(v)
		case "Input Dims", "Input dims":
			e.dims = v.Raw
		case "Input type":
			e.types = v.Raw
		case "Input Strides":
			e.strides = v.Raw
		case "Concrete Inputs":
			e.concrete = v.Raw
		case "kernel":
			if v.Type == gjson.String {
				e.kernel = v.Str
			}
		case "name":
			if v.Type == gjson.String {
				e.argName = v.Str
			}
		}
		return true
	}
	keys := func(k, v gjson.Result) bool {
		switch k.Str {
		case "ph":
			e.ph = str(v)
		case "cat":
			e.cat = str(v)
		case "name":
			e.name = str(v)
		case "pid":
			e.pid = str(v)
		case "tid":
			e.tid = str(v)
		case "ts":
			e.ts, e.tsOff = str(v), v.Index
		case "dur":
			e.dur = str(v)
		case "id":
			e.id = str(v)
		case "args":
			if v.IsObject() && needArgs(&e) {
				v.ForEach(args)
			}
		}
		return true
	}
	gjson.Get(s, "traceEvents").ForEach(func(_, ev gjson.Result) bool {
		e.reset()
		ev.ForEach(keys)
		c.events++
		c.add(sc, &e, ev.Index, false)
		return true
	})
	return c
}

func compareDoc(tb testing.TB) string {
	p := benchFile(tb.(*testing.B))
	data, _, err := readFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return unsafe.String(unsafe.SliceData(data), len(data))
}

// BenchmarkEventsScanner is the scanner's pass over the document (parseDoc), one worker
// with -cpu 1 (the same work as BenchmarkEventsGJSON), split in chunks with more.
func BenchmarkEventsScanner(b *testing.B) {
	s := compareDoc(b)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseDoc(s); err != nil {
			b.Fatal(err.msg)
		}
	}
}

// BenchmarkEventsGJSON is gjsonEvents on the same document.
func BenchmarkEventsGJSON(b *testing.B) {
	s := compareDoc(b)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		gjsonEvents(s)
	}
}

// TestEventsGJSONSame: both read the same records from every shared trace (so the
// benchmarks compare the same work).
func TestEventsGJSONSame(t *testing.T) {
	for _, p := range sharedTraces(t) {
		data, _, err := readFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := unsafe.String(unsafe.SliceData(data), len(data))
		if strings.HasPrefix(strings.TrimSpace(s), "[") {
			continue // the legacy bare-array form: gjsonEvents reads only traceEvents
		}
		raw, serr := parseDoc(s)
		if serr != nil {
			t.Fatal(serr.msg)
		}
		g := gjsonEvents(s)
		var ops, acts, rts, pys, events int
		for _, c := range raw.chunks {
			ops, acts, rts, pys, events = ops+len(c.ops), acts+len(c.acts), rts+len(c.rts), pys+len(c.pys), events+c.events
		}
		if ops != len(g.ops) || acts != len(g.acts) || rts != len(g.rts) || pys != len(g.pys) || events != g.events {
			t.Errorf("%s: scanner ops %d acts %d rts %d pys %d events %d; gjson %d %d %d %d %d", traceName(p),
				ops, acts, rts, pys, events, len(g.ops), len(g.acts), len(g.rts), len(g.pys), g.events)
		}
		i := 0
		for _, c := range raw.chunks {
			for _, a := range c.acts {
				if a != g.acts[i] {
					t.Errorf("%s: activity %d: scanner %+v, gjson %+v", traceName(p), i, a, g.acts[i])
				}
				i++
			}
		}
	}
}

// gjsonET is ReadET with gjson instead of encoding/json (the same nodes; no type errors).
func gjsonET(path string) (*ExecTrace, error) {
	data, release, err := readFile(path)
	if err != nil {
		return nil, err
	}
	defer release()
	s := unsafe.String(unsafe.SliceData(data), len(data))
	if !gjson.Valid(s) {
		return nil, &Error{Path: path, Offset: -1, Msg: "invalid JSON"}
	}
	tensors := func(v gjson.Result) []Tensor {
		vals, types := v.Get("values"), v.Get("types").Array()
		if !vals.IsArray() {
			return nil
		}
		var out []Tensor
		vals.ForEach(func(_, x gjson.Result) bool {
			t := Tensor{ID: -1, Storage: -1}
			if i := len(out); i < len(types) && strings.HasPrefix(types[i].Str, "Tensor(") && x.IsArray() {
				var nums [5]int64
				ok, k := true, 0
				var dev string
				x.ForEach(func(_, y gjson.Result) bool {
					if k < 5 {
						n, good := parseInt(y.Raw)
						ok = ok && good && y.Type == gjson.Number
						nums[k] = n
					} else {
						ok = ok && y.Type == gjson.String
						dev = y.Str
					}
					k++
					return k < 6
				})
				if ok && k == 6 {
					t = Tensor{ID: nums[0], Storage: nums[1], Offset: nums[2], Numel: nums[3], ItemSize: nums[4], Device: strings.Clone(dev)}
				}
			}
			out = append(out, t)
			return true
		})
		return out
	}
	et := &ExecTrace{Path: path}
	gjson.Get(s, "nodes").ForEach(func(_, n gjson.Result) bool {
		node := ETNode{RFID: -1}
		n.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				node.ID = v.Int()
			case "name":
				node.Name = strings.Clone(v.Str)
			case "inputs":
				node.Inputs = tensors(v)
			case "outputs":
				node.Outputs = tensors(v)
			case "attrs":
				v.ForEach(func(_, a gjson.Result) bool {
					if a.Get("name").Str != "rf_id" {
						return true
					}
					if x, ok := parseInt(a.Get("value").Raw); ok {
						node.RFID = x
					}
					return false
				})
			}
			return true
		})
		et.Nodes = append(et.Nodes, node)
		return true
	})
	return et, nil
}

// etBenchFile is the largest shared execution trace.
func etBenchFile(tb testing.TB) string {
	return shared.Require(tb, "traces", "h200", "convnext_tiny_train_bf16.et.json.gz")
}

// BenchmarkETDecode is ReadET (encoding/json) on the largest shared execution trace,
// BenchmarkETGJSON gjsonET on the same (both include the decompression).
func BenchmarkETDecode(b *testing.B) {
	p := etBenchFile(b)
	for b.Loop() {
		if _, err := ReadET(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkETGJSON(b *testing.B) {
	p := etBenchFile(b)
	for b.Loop() {
		if _, err := gjsonET(p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestETGJSONSame: both ET readers read the same nodes from every shared execution trace.
func TestETGJSONSame(t *testing.T) {
	m, _ := filepath.Glob(filepath.Join(shared.Require(t, "traces", "h200"), "*.et.json.gz"))
	for _, p := range m {
		a, err := ReadET(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := gjsonET(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Nodes) != len(b.Nodes) {
			t.Fatalf("%s: %d nodes, gjson %d", p, len(a.Nodes), len(b.Nodes))
		}
		for i, x := range a.Nodes {
			y := b.Nodes[i]
			if x.ID != y.ID || x.Name != y.Name || x.RFID != y.RFID || !slices.Equal(x.Inputs, y.Inputs) || !slices.Equal(x.Outputs, y.Outputs) {
				t.Fatalf("%s: node %d: %+v, gjson %+v", p, i, x, y)
			}
		}
	}
}
