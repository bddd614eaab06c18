package trace

import (
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"
)

// This file turns the JSON text of one trace into per-kind records (parser output),
// in parallel over chunks of the traceEvents array. build.go turns the records into
// the model.

// Counters of tolerated problems, merged over workers.
type warnCounts struct {
	negTime    int // negative ts or dur clamped to 0
	noTime     int // X events without ts, skipped
	badUTF8    int // names with invalid UTF-8, repaired
	badArgs    int // args values of the wrong type, ignored
	legacyOps  int // uncategorized X events of the legacy array form, read as ops
	otherFlows int
}

func (w *warnCounts) add(o *warnCounts) {
	w.negTime += o.negTime
	w.noTime += o.noTime
	w.badUTF8 += o.badUTF8
	w.badArgs += o.badArgs
	w.legacyOps += o.legacyOps
	w.otherFlows += o.otherFlows
}

// Records are pointer-free (names, threads and inputs are ids into the chunk's
// tables) so that the garbage collector does not scan them.
type opRec struct {
	name           uint32
	thread         uint32
	inputs         uint32 // index+1 into chunk.inputTab; 0 = none
	kind           Kind
	ts, dur        int64
	ext, rf, evIdx int64
	seq, fwd       int64
}

type rtRec struct {
	name, thread uint32
	kernel       uint32 // ROCm: kernel name on the hip launch; 0 = none
	ts, dur      int64
	corr         int64
	grid, block  [3]int32
}

type pyRec struct {
	name, thread uint32
	ts, dur      int64
}

type flowRec struct {
	start  bool
	id     string
	thread uint32
	ts     int64
}

type threadName struct {
	thread uint32
	name   string
}

// chunk is one worker's output.
type chunk struct {
	ops    []opRec
	rts    []rtRec
	acts   []Activity
	pys    []pyRec
	flows  []flowRec
	tnames []threadName
	kinds  [numKinds]int
	flowsN int // all flow events (s/f/t)
	events int
	warn   warnCounts
	end    int // offset just past the last event parsed
	closed bool
	err    *scanError

	names    []string // id -> name; id 0 is ""
	nameIdx  map[string]uint32
	threads  []threadKey // id -> (pid, tid)
	thIdx    map[threadKey]uint32
	lastTh   threadKey
	lastThID uint32
	inputTab [][]Input
	inputIdx map[inputKey]uint32
}

const numKinds = int(KindGPUAnnotation) + 1

type inputKey struct{ dims, types, strides, concrete string }

func newChunk(size int) *chunk {
	// Estimated record counts, from the share of event kinds in real traces
	// (about 300 bytes per event).
	n := size / 300
	return &chunk{
		ops: make([]opRec, 0, n/3), pys: make([]pyRec, 0, n/3), rts: make([]rtRec, 0, n/8),
		names: []string{""}, nameIdx: make(map[string]uint32, 1024),
		thIdx: make(map[threadKey]uint32, 16), lastThID: ^uint32(0),
		inputIdx: make(map[inputKey]uint32, 256),
	}
}

// name interns s (copying it, so that nothing refers to the mapped file
// afterwards) and returns its id.
func (c *chunk) name(s string) uint32 {
	if id, ok := c.nameIdx[s]; ok {
		return id
	}
	v := strings.Clone(s)
	if !utf8.ValidString(v) {
		c.warn.badUTF8++
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	id := uint32(len(c.names))
	c.names = append(c.names, v)
	c.nameIdx[v] = id
	return id
}

func (c *chunk) in(s string) string { return c.names[c.name(s)] }

// thread returns the id of (pid, tid).
func (c *chunk) thread(pid, tid string) uint32 {
	k := threadKey{pid, tid}
	if k == c.lastTh && c.lastThID != ^uint32(0) {
		return c.lastThID
	}
	id, ok := c.thIdx[k]
	if !ok {
		k = threadKey{c.in(pid), c.in(tid)}
		id = uint32(len(c.threads))
		c.threads = append(c.threads, k)
		c.thIdx[k] = id
	}
	c.lastTh, c.lastThID = c.threads[id], id
	return id
}

// event holds one event while it is being read.
type event struct {
	ph, cat, name     string
	pid, tid, id      string
	ts, dur           string
	tsOff             int
	ext, corr, rf, ev int64
	seq, fwd, stream  int64
	device, bytes     int64
	pyID, pyParent    int64
	grid, block       [3]int32
	dims, types       string
	strides, concrete string
	kernel, argName   string
}

func (e *event) reset() {
	*e = event{ext: -1, corr: -1, rf: -1, ev: -1, seq: -1, fwd: -1, stream: -1, device: -1, bytes: -1, pyID: -1, pyParent: -1}
}

// parseEvents reads events from sc.s[sc.i:] until the array closes (closed) or
// the scanner reaches end (a chunk boundary). legacy selects the bare-array form.
func (c *chunk) parseEvents(sc *scanner, end int, legacy bool) {
	var e event
	for sc.err == nil {
		if sc.peek() == ']' {
			sc.i++
			c.closed = true
			c.end = sc.i
			return
		}
		c.parseEvent(sc, &e, legacy)
		if sc.err != nil {
			break
		}
		switch sc.peek() {
		case ',':
			sc.i++
			sc.ws()
			if sc.i >= end {
				c.end = sc.i
				return
			}
		case ']':
			sc.i++
			c.closed = true
			c.end = sc.i
			return
		default:
			sc.unexpected("',' or ']' after an event")
		}
	}
	c.err = sc.err
}

func (c *chunk) parseEvent(sc *scanner, e *event, legacy bool) {
	e.reset()
	sc.ws()
	start := sc.i
	if !sc.expect('{') {
		return
	}
	if sc.peek() == '}' {
		sc.i++
		c.events++
		c.kinds[KindOther]++
		return
	}
	for sc.err == nil {
		k := sc.str()
		if sc.i < len(sc.s) && sc.s[sc.i] == ':' { // the common case, inline
			sc.i++
		} else if !sc.expect(':') {
			return
		}
		switch k {
		case "ph":
			e.ph, _ = sc.scalar()
		case "cat":
			e.cat, _ = sc.scalar()
		case "name":
			e.name, _ = sc.scalar()
		case "pid":
			e.pid, _ = sc.scalar()
		case "tid":
			e.tid, _ = sc.scalar()
		case "ts":
			sc.ws()
			e.tsOff = sc.i
			e.ts, _ = sc.scalar()
		case "dur":
			e.dur, _ = sc.scalar()
		case "id":
			e.id, _ = sc.scalar()
		case "args":
			if sc.peek() == '{' && needArgs(e) {
				c.parseArgs(sc, e)
			} else {
				sc.skipFast()
			}
		default:
			sc.skip()
		}
		if sc.i < len(sc.s) && sc.s[sc.i] == ',' {
			sc.i++
			continue
		}
		switch sc.peek() {
		case ',':
			sc.i++
			continue
		case '}':
			sc.i++
		default:
			sc.unexpected("',' or '}' in an event")
			return
		}
		break
	}
	if sc.err != nil {
		return
	}
	c.events++
	c.add(sc, e, start, legacy)
}

func (c *chunk) parseArgs(sc *scanner, e *event) {
	sc.i++ // '{'
	if sc.peek() == '}' {
		sc.i++
		return
	}
	for sc.err == nil {
		k := sc.str()
		if sc.i < len(sc.s) && sc.s[sc.i] == ':' { // the common case, inline
			sc.i++
		} else if !sc.expect(':') {
			return
		}
		switch k {
		case "External id", "external id":
			e.ext = c.intArg(sc)
		case "correlation":
			e.corr = c.intArg(sc)
		case "Record function id":
			e.rf = c.intArg(sc)
		case "Ev Idx", "Profiler Event Index":
			e.ev = c.intArg(sc)
		case "Sequence number":
			e.seq = c.intArg(sc)
		case "Fwd thread id":
			e.fwd = c.intArg(sc)
		case "stream":
			e.stream = c.intArg(sc)
		case "device":
			e.device = c.intArg(sc)
		case "bytes":
			e.bytes = c.intArg(sc)
		case "Python id":
			e.pyID = c.intArg(sc)
		case "Python parent id":
			e.pyParent = c.intArg(sc)
		case "grid":
			e.grid = c.dim3(sc)
		case "block":
			e.block = c.dim3(sc)
		case "Input Dims", "Input dims":
			e.dims = sc.raw()
		case "Input type":
			e.types = sc.raw()
		case "Input Strides":
			e.strides = sc.raw()
		case "Concrete Inputs":
			e.concrete = sc.raw()
		case "kernel":
			if sc.peek() == '"' {
				e.kernel = sc.str()
			} else {
				sc.skip()
			}
		case "name":
			if sc.peek() == '"' {
				e.argName = sc.str()
			} else {
				sc.skip()
			}
		default:
			sc.skipFast()
		}
		if sc.i < len(sc.s) && sc.s[sc.i] == ',' {
			sc.i++
			continue
		}
		switch sc.peek() {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return
		default:
			sc.unexpected("',' or '}' in args")
			return
		}
	}
}

// intArg reads an integer argument; null, strings, floats and out-of-range values
// give -1 (a wrong type is counted).
func (c *chunk) intArg(sc *scanner) int64 {
	switch ch := sc.peek(); {
	case ch == '-' || (ch >= '0' && ch <= '9'):
		v, ok := parseInt(sc.num())
		if !ok {
			return -1
		}
		return v
	case ch == 'n':
		sc.lit()
		return -1
	default:
		c.warn.badArgs++
		sc.skip()
		return -1
	}
}

func (c *chunk) dim3(sc *scanner) (d [3]int32) {
	if sc.peek() != '[' {
		sc.skip() // e.g. Triton cpu_ops carry grid as a string "grid(100,)"
		return d
	}
	sc.array(func(i int) {
		v := c.intArg(sc)
		if i < 3 && v >= 0 && v < 1<<31 {
			d[i] = int32(v)
		}
	})
	return d
}

// needArgs reports whether the args of the event read so far are needed: not
// for python_function frames, flows, instants and unknown categories (when "cat"
// comes before "args", as Kineto writes it).
func needArgs(e *event) bool {
	switch e.ph {
	case "M":
		return true
	case "s", "f", "t", "i", "I":
		return false
	}
	if e.ph != "X" || e.cat == "" {
		return true
	}
	switch classify(e.cat) {
	case KindPython, KindGPUAnnotation, KindOther:
		return false
	}
	return true
}

func classify(cat string) Kind {
	switch cat {
	case "cpu_op", "Operator":
		return KindCPUOp
	case "user_annotation", "User":
		return KindUserAnnotation
	case "python_function":
		return KindPython
	case "cuda_runtime", "Runtime", "cuda_driver":
		return KindRuntime
	case "kernel", "Kernel":
		return KindKernel
	case "gpu_memcpy", "Memcpy":
		return KindMemcpy
	case "gpu_memset", "Memset":
		return KindMemset
	case "gpu_user_annotation":
		return KindGPUAnnotation
	case "", "ac2g", "fwdbwd", "Trace", "cpu_instant_event":
		return KindOther
	}
	if l := strings.ToLower(cat); l != cat {
		return classify(l)
	}
	return KindOther
}

func isFwdBwdFlow(cat string) bool {
	switch cat {
	case "fwdbwd", "fwd_bwd", "forward_backward":
		return true
	}
	return false
}

// time parses a ts or dur; negative values are clamped to 0 and counted.
func (c *chunk) time(sc *scanner, t string, off int, what string) (int64, bool) {
	v, ok := parseMicros(t)
	if !ok {
		sc.failf(off, "invalid %s %q", what, t)
		return 0, false
	}
	if v < 0 {
		c.warn.negTime++
		v = 0
	}
	return v, true
}

func (c *chunk) add(sc *scanner, e *event, start int, legacy bool) {
	if e.ph == "M" {
		if e.name == "thread_name" && e.argName != "" {
			c.tnames = append(c.tnames, threadName{c.thread(e.pid, e.tid), c.in(e.argName)})
		}
		c.kinds[KindOther]++
		return
	}
	if e.ph == "s" || e.ph == "f" || e.ph == "t" {
		c.flowsN++
		c.kinds[KindOther]++
		if isFwdBwdFlow(e.cat) && e.ph != "t" {
			ts, ok := parseMicros(e.ts)
			if !ok {
				c.warn.otherFlows++
				return
			}
			c.flows = append(c.flows, flowRec{start: e.ph == "s", id: c.in(e.id), thread: c.thread(e.pid, e.tid), ts: ts})
		}
		return
	}
	k := KindOther
	if e.ph == "X" {
		k = classify(e.cat)
		if k == KindOther && legacy && e.cat == "" {
			k = KindCPUOp
			c.warn.legacyOps++
		}
	}
	c.kinds[k]++
	if k == KindOther || k == KindGPUAnnotation {
		return
	}
	if e.ts == "" {
		c.warn.noTime++
		return
	}
	ts, ok := c.time(sc, e.ts, e.tsOff, "ts")
	if !ok {
		return
	}
	var dur int64
	if e.dur != "" {
		if dur, ok = c.time(sc, e.dur, start, "dur"); !ok {
			return
		}
	}
	switch k {
	case KindCPUOp, KindUserAnnotation:
		var inputs uint32
		if e.dims != "" || e.types != "" || e.concrete != "" {
			inputs = c.inputs(e)
		}
		c.ops = append(c.ops, opRec{
			name: c.name(e.name), kind: k, thread: c.thread(e.pid, e.tid), ts: ts, dur: dur,
			ext: e.ext, rf: e.rf, evIdx: e.ev, seq: e.seq, fwd: e.fwd, inputs: inputs,
		})
	case KindRuntime:
		r := rtRec{name: c.name(e.name), thread: c.thread(e.pid, e.tid), ts: ts, dur: dur, corr: e.corr, grid: e.grid, block: e.block}
		if e.kernel != "" {
			r.kernel = c.name(e.kernel)
		}
		c.rts = append(c.rts, r)
	case KindPython:
		c.pys = append(c.pys, pyRec{name: c.name(e.name), thread: c.thread(e.pid, e.tid), ts: ts, dur: dur})
	case KindKernel, KindMemcpy, KindMemset:
		a := Activity{Name: c.in(e.name), Start: ts, Dur: dur, Correlation: e.corr, ExternalID: e.ext,
			Grid: e.grid, Block: e.block, Bytes: e.bytes, Op: -1, Launch: -1}
		switch k {
		case KindMemcpy:
			a.Kind = ActMemcpy
		case KindMemset:
			a.Kind = ActMemset
		}
		if a.Bytes < 0 {
			a.Bytes = 0
		}
		if v, ok := parseInt(e.pid); ok {
			a.Device = int(v)
		} else if e.device >= 0 {
			a.Device = int(e.device)
		}
		if e.stream >= 0 {
			a.Stream = e.stream
		} else {
			a.Stream = trailingInt(e.tid)
		}
		c.acts = append(c.acts, a)
	}
}

// trailingInt reads the number at the end of s ("stream 7" -> 7, "7" -> 7), -1 if none.
func trailingInt(s string) int64 {
	j := len(s)
	for j > 0 && s[j-1] >= '0' && s[j-1] <= '9' {
		j--
	}
	if j == len(s) {
		return -1
	}
	v, ok := parseInt(s[j:])
	if !ok {
		return -1
	}
	return v
}

// inputs decodes Input Dims / Input type / Input Strides / Concrete Inputs, cached
// by their text: equal texts share one (read-only) slice.
func (c *chunk) inputs(e *event) uint32 {
	key := inputKey{e.dims, e.types, e.strides, e.concrete}
	if id, ok := c.inputIdx[key]; ok {
		return id
	}
	c.inputTab = append(c.inputTab, decodeInputs(e.dims, e.types, e.strides, e.concrete))
	id := uint32(len(c.inputTab))
	c.inputIdx[inputKey{strings.Clone(e.dims), strings.Clone(e.types), strings.Clone(e.strides), strings.Clone(e.concrete)}] = id
	return id
}

// shape is one parsed element of Input Dims / Input Strides.
type shape struct {
	dims []int64
	list [][]int64
}

func parseShapes(raw string) []shape {
	if raw == "" || raw == "null" {
		return nil
	}
	sc := &scanner{s: raw}
	var out []shape
	if sc.peek() != '[' {
		return nil
	}
	sc.array(func(int) {
		var sh shape
		if sc.peek() != '[' {
			sc.skip()
			out = append(out, sh)
			return
		}
		nested := false
		sc.array(func(int) {
			switch ch := sc.peek(); {
			case ch == '[':
				nested = true
				var l []int64
				sc.array(func(int) {
					if ch := sc.peek(); ch == '-' || (ch >= '0' && ch <= '9') {
						if v, ok := parseInt(sc.num()); ok {
							l = append(l, v)
						}
						return
					}
					sc.skip() // truncated lists: "...", nested deeper
				})
				sh.list = append(sh.list, l)
			case ch == '-' || (ch >= '0' && ch <= '9'):
				if v, ok := parseInt(sc.num()); ok {
					sh.dims = append(sh.dims, v)
				}
			default:
				sc.skip()
			}
		})
		if nested {
			sh.dims = nil // a TensorList: element sizes are in list
		}
		out = append(out, sh)
	})
	return out
}

func parseStrings(raw string) []string {
	if raw == "" || raw == "null" {
		return nil
	}
	sc := &scanner{s: raw}
	if sc.peek() != '[' {
		return nil
	}
	var out []string
	sc.array(func(int) {
		v, _ := sc.scalar()
		if sc.err == nil {
			if sc.peek() != ',' && sc.peek() != ']' {
				sc.skip()
			}
			out = append(out, strings.Clone(v))
		}
	})
	return out
}

func decodeInputs(dims, types, strides, concrete string) []Input {
	d := parseShapes(dims)
	st := parseShapes(strides)
	ty := parseStrings(types)
	co := parseStrings(concrete)
	n := max(len(d), len(ty), len(co))
	if n == 0 {
		return nil
	}
	in := make([]Input, n)
	for i := range in {
		if i < len(ty) {
			in[i].Type = ty[i]
		}
		if i < len(d) {
			in[i].Dims = d[i].dims
			in[i].List = d[i].list
		}
		if i < len(st) && st[i].list == nil {
			in[i].Strides = st[i].dims
		}
		if i < len(co) {
			in[i].Concrete = co[i]
			if in[i].List == nil && len(in[i].Dims) == 0 {
				if l, ok := intList(co[i]); ok {
					in[i].List = [][]int64{l}
				}
			}
		}
	}
	return in
}

// intList parses a Concrete Inputs text such as "[2, -1]" (int[] arguments).
func intList(s string) ([]int64, bool) {
	if len(s) < 2 || s[0] != '[' {
		return nil, false
	}
	sc := &scanner{s: s}
	var l []int64
	ok := sc.array(func(int) {
		v, isNum := parseInt(sc.num())
		if !isNum {
			sc.fail(sc.i, "")
		}
		l = append(l, v)
	})
	if !ok || sc.err != nil || sc.peek() != 0 {
		return nil, false
	}
	return l, true
}

// splitArray picks chunk start offsets inside the array whose first element starts
// at first, for w workers. It uses the writer's own event indentation ("\n  {" in
// Kineto's output): a newline never occurs inside a JSON string, so a line
// starting with exactly that indentation and '{', preceded by ',', is an event
// boundary. Compact files get one chunk (see splitGeneric).
// minSplit is the smallest array (bytes) parsed in parallel; tests lower it.
var minSplit = 4 << 20

func splitArray(s string, first int, w int) []int {
	starts := []int{first}
	if w < 2 || first >= len(s) || len(s)-first < minSplit {
		return starts
	}
	// The indentation of the first event.
	j := first
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	if j == 0 || s[j-1] != '\n' {
		return splitGeneric(s, first, w)
	}
	marker := s[j-1 : first+1] // "\n" + indent + "{"
	size := (len(s) - first) / w
	for k := 1; k < w; k++ {
		from := first + k*size
		if from <= starts[len(starts)-1] {
			continue
		}
		p := strings.Index(s[from:], marker)
		if p < 0 {
			break
		}
		b := from + p + len(marker) - 1
		// Validate: the previous non-space byte is ','.
		q := from + p
		for q > 0 && (s[q-1] == ' ' || s[q-1] == '\n' || s[q-1] == '\r' || s[q-1] == '\t') {
			q--
		}
		if q == 0 || s[q-1] != ',' {
			continue
		}
		if b > starts[len(starts)-1] {
			starts = append(starts, b)
		}
	}
	return starts
}

// splitGeneric finds element boundaries by skipping elements sequentially (for
// compact, single-line files).
func splitGeneric(s string, first int, w int) []int {
	starts := []int{first}
	size := (len(s) - first) / w
	next := first + size
	sc := &scanner{s: s, i: first}
	for sc.err == nil && len(starts) < w {
		sc.skip()
		if sc.peek() != ',' {
			break
		}
		sc.i++
		sc.ws()
		if sc.i >= next {
			starts = append(starts, sc.i)
			next = sc.i + size
		}
	}
	return starts
}

// parseArray parses the events array whose '[' is at open. It returns the
// chunks in file order and the offset just past the closing ']'.
func parseArray(s string, open int, legacy bool) ([]*chunk, int, *scanError) {
	sc := &scanner{s: s, i: open + 1}
	sc.ws()
	w := runtime.GOMAXPROCS(0)
	starts := splitArray(s, sc.i, w)
	if len(starts) > 1 {
		chunks := make([]*chunk, len(starts))
		var wg sync.WaitGroup
		for k := range starts {
			end := len(s)
			if k+1 < len(starts) {
				end = starts[k+1]
			}
			chunks[k] = newChunk(end - starts[k])
			wg.Add(1)
			go func(c *chunk, from, end int) {
				defer wg.Done()
				c.parseEvents(&scanner{s: s, i: from}, end, legacy)
			}(chunks[k], starts[k], end)
		}
		wg.Wait()
		ok := true
		for k, c := range chunks {
			last := k == len(chunks)-1
			if c.err != nil || c.closed != last || (!last && c.end != starts[k+1]) {
				ok = false
				break
			}
		}
		if ok {
			return chunks, chunks[len(chunks)-1].end, nil
		}
		// A wrong split or bad input: parse sequentially for the exact result.
	}
	c := newChunk(len(s) - sc.i)
	c.parseEvents(sc, len(s)+1, legacy)
	if c.err != nil {
		return nil, 0, c.err
	}
	if !c.closed {
		return nil, 0, &scanError{len(s), "traceEvents array is not closed (truncated file?)"}
	}
	return []*chunk{c}, c.end, nil
}
