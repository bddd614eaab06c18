package trace

import (
	"cmp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// stats are counts kept beside the model for the summary helpers.
type stats struct {
	kinds    [numKinds]int
	events   int
	runtimes int
	launches int // runtime events whose name contains "Launch"
	// launchNs are the host durations of the kernel launch calls (launches but
	// cudaGraphLaunch), for LaunchHostNs.
	launchNs []int64
	flows    int
	fwdBwd   int // fwd->bwd links
	noLaunch int // activities whose correlation has no runtime event
}

type threadKey struct{ pid, tid string }

// cmpID orders pid/tid values: integers numerically, before other strings.
func cmpID(a, b string) int {
	ai, aok := parseInt(a)
	bi, bok := parseInt(b)
	switch {
	case aok && bok:
		return cmp.Compare(ai, bi)
	case aok:
		return -1
	case bok:
		return 1
	}
	return strings.Compare(a, b)
}

func cmpKey(a, b threadKey) int {
	if c := cmpID(a.pid, b.pid); c != 0 {
		return c
	}
	return cmpID(a.tid, b.tid)
}

// build turns parser records into the model. A non-empty message is an error.
func build(r *rawTrace) (*Trace, string) {
	t := &Trace{Rank: r.rank, WorldSize: r.worldSize, BaseTimeNs: r.baseTimeNs, Devices: r.devices, Meta: r.meta}
	var w warnCounts
	var nOps, nRts, nActs, nPys int
	for _, c := range r.chunks {
		w.add(&c.warn)
		for k := range c.kinds {
			t.stats.kinds[k] += c.kinds[k]
		}
		t.stats.events += c.events
		t.stats.flows += c.flowsN
		nOps += len(c.ops)
		nRts += len(c.rts)
		nActs += len(c.acts)
		nPys += len(c.pys)
	}
	if t.stats.events == 0 {
		return nil, "empty trace: traceEvents has no events"
	}
	base := r.baseTimeNs
	t.stats.runtimes = nRts

	// All (pid, tid) keys of the file, sorted; chunk-local thread ids map to them.
	keyIdx := map[threadKey]int32{}
	var keys []threadKey
	for _, c := range r.chunks {
		for _, k := range c.threads {
			if _, ok := keyIdx[k]; !ok {
				keyIdx[k] = 0
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, cmpKey)
	for i, k := range keys {
		keyIdx[k] = int32(i)
	}
	local := make([][]int32, len(r.chunks))
	hasOps := make([]bool, len(keys))
	tnames := map[int32]string{}
	for ci, c := range r.chunks {
		local[ci] = make([]int32, len(c.threads))
		for i, k := range c.threads {
			local[ci][i] = keyIdx[k]
		}
		for i := range c.ops {
			hasOps[local[ci][c.ops[i].thread]] = true
		}
		for _, tn := range c.tnames {
			tnames[local[ci][tn.thread]] = tn.name
		}
	}
	// Threads: the keys that have ops, in key order.
	keyThread := make([]int32, len(keys))
	var threadKeyOf []int32
	for i, k := range keys {
		keyThread[i] = -1
		if hasOps[i] {
			keyThread[i] = int32(len(t.Threads))
			threadKeyOf = append(threadKeyOf, int32(i))
			t.Threads = append(t.Threads, Thread{Pid: k.pid, Tid: k.tid, Name: tnames[int32(i)]})
		}
	}

	// Ops (sorted by (thread, start, -dur, Ev Idx, file order), through compact
	// keys) and Python frames are built concurrently.
	var pyLo []int32
	var wg sync.WaitGroup
	wg.Go(func() {
		pyLo = buildPython(t, r.chunks, local, keys, keyThread, nPys, base)
	})
	func() {
		// Ops sorted by (thread, start, -dur, Ev Idx, file order), through compact keys.
		type opKey struct {
			thread, src, idx int32
			ts, dur, ev      int64
		}
		okeys := make([]opKey, 0, nOps)
		for ci, c := range r.chunks {
			for i := range c.ops {
				o := &c.ops[i]
				okeys = append(okeys, opKey{keyThread[local[ci][o.thread]], int32(ci), int32(i), o.ts, o.dur, o.evIdx})
			}
		}
		okeys = sortParallel(okeys, func(x, y opKey) int {
			if x.thread != y.thread {
				return cmp.Compare(x.thread, y.thread)
			}
			if x.ts != y.ts {
				return cmp.Compare(x.ts, y.ts)
			}
			if x.dur != y.dur {
				return cmp.Compare(y.dur, x.dur)
			}
			if x.ev != y.ev {
				return cmp.Compare(x.ev, y.ev)
			}
			if x.src != y.src {
				return cmp.Compare(x.src, y.src)
			}
			return cmp.Compare(x.idx, y.idx)
		})
		t.Ops = make([]Op, len(okeys))
		parallelFor(len(okeys), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				k := &okeys[i]
				c := r.chunks[k.src]
				o := &c.ops[k.idx]
				var in []Input
				if o.inputs > 0 {
					in = c.inputTab[o.inputs-1]
				}
				t.Ops[i] = Op{Name: c.names[o.name], Kind: o.kind, Thread: k.thread, Start: o.ts + base, Dur: o.dur,
					Parent: -1, ExternalID: o.ext, RecordFunctionID: o.rf, EvIdx: o.evIdx, Seq: o.seq,
					FwdThreadID: o.fwd, Inputs: in, Bwd: -1, Fwd: -1, Py: -1, Step: -1}
			}
		})
		for _, c := range r.chunks {
			c.ops = nil
		}
	}()
	wg.Wait()
	// Thread ranges in Ops.
	thLo := ranges(len(t.Threads), len(t.Ops), func(i int) int32 { return t.Ops[i].Thread })

	// The op tree, by time nesting.
	opSpan := func(i int32) (int64, int64) { return t.Ops[i].Start, t.Ops[i].Dur }
	parents := nest(len(t.Ops), func(i int) int32 { return t.Ops[i].Thread }, opSpan)
	nChildren := make([]int32, len(t.Ops))
	for i, p := range parents {
		t.Ops[i].Parent = p
		if p >= 0 {
			nChildren[p]++
		} else {
			th := &t.Threads[t.Ops[i].Thread]
			th.Roots = append(th.Roots, int32(i))
		}
	}
	pool := make([]int32, 0, len(t.Ops))
	for i := range t.Ops {
		if n := nChildren[i]; n > 0 {
			t.Ops[i].Children = pool[len(pool) : len(pool) : len(pool)+int(n)]
			pool = pool[:len(pool)+int(n)]
		}
	}
	for i := range t.Ops {
		if p := t.Ops[i].Parent; p >= 0 {
			t.Ops[p].Children = append(t.Ops[p].Children, int32(i))
		}
	}

	// Op.Py: the innermost python_function frame on the op's thread.
	if pyLo != nil {
		span := func(i int32) (int64, int64) { return t.Python[i].Start, t.Python[i].Dur }
		parent := func(i int32) int32 { return t.Python[i].Parent }
		parallelFor(len(t.Ops), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				op := &t.Ops[i]
				g := threadKeyOf[op.Thread]
				op.Py = enclosing(pyLo[g], pyLo[g+1], op.Start, span, parent)
			}
		})
	}

	// Runtime events -> innermost enclosing op on their thread.
	type launch struct {
		ts          int64
		op, th      int32
		graph       bool
		grid, block [3]int32
	}
	rts := make([]launch, 0, nRts)
	corr := make(map[int64]int32, nRts)
	parent := func(j int32) int32 { return t.Ops[j].Parent }
	for ci, c := range r.chunks {
		for i := range c.rts {
			rt := &c.rts[i]
			name := c.names[rt.name]
			if strings.Contains(name, "Launch") {
				t.stats.launches++
				if !strings.Contains(name, "GraphLaunch") {
					t.stats.launchNs = append(t.stats.launchNs, rt.dur)
				}
			}
			l := launch{ts: rt.ts + base, op: -1, th: keyThread[local[ci][rt.thread]], graph: strings.Contains(name, "GraphLaunch"), grid: rt.grid, block: rt.block}
			if l.th >= 0 && isDeviceSync(name) {
				t.Threads[l.th].Syncs = append(t.Threads[l.th].Syncs, l.ts)
			}
			if rt.corr > 0 { // CUPTI correlation ids start at 1
				if _, dup := corr[rt.corr]; !dup {
					corr[rt.corr] = int32(len(rts))
				}
			}
			rts = append(rts, l)
		}
		c.rts = nil
	}
	parallelFor(len(rts), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if l := &rts[i]; l.th >= 0 {
				l.op = enclosing(thLo[l.th], thLo[l.th+1], l.ts, opSpan, parent)
			}
		}
	})
	for i := range t.Threads {
		slices.Sort(t.Threads[i].Syncs)
	}
	t.Acts = make([]Activity, 0, nActs)
	var flows []flow
	for ci, c := range r.chunks {
		for _, a := range c.acts {
			a.Start += base
			t.Acts = append(t.Acts, a)
		}
		for _, f := range c.flows {
			flows = append(flows, flow{start: f.start, id: f.id, thread: keyThread[local[ci][f.thread]], ts: f.ts + base})
		}
		c.acts, c.flows = nil, nil
	}

	// Activities: sorted by start; linked through correlation.
	slices.SortStableFunc(t.Acts, func(a, b Activity) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		return cmp.Compare(a.Stream, b.Stream)
	})
	perCorr := map[int64]int32{}
	for i := range t.Acts {
		if a := &t.Acts[i]; a.Kind == ActKernel && a.Correlation > 0 {
			perCorr[a.Correlation]++
		}
	}
	noOp := 0
	for i := range t.Acts {
		a := &t.Acts[i]
		if a.Correlation <= 0 {
			continue
		}
		ri, ok := corr[a.Correlation]
		if !ok {
			t.stats.noLaunch++
			continue
		}
		rt := &rts[ri]
		a.Launch = rt.ts
		a.Op = rt.op
		if a.Op < 0 {
			noOp++
		}
		a.Graph = a.Kind == ActKernel && (perCorr[a.Correlation] > 1 || rt.graph)
		if a.Grid == ([3]int32{}) {
			a.Grid = rt.grid
		}
		if a.Block == ([3]int32{}) {
			a.Block = rt.block
		}
	}
	// Op.Acts in launch order.
	actOrder := make([]int32, 0, len(t.Acts))
	nActsOf := make([]int32, len(t.Ops))
	for i := range t.Acts {
		if op := t.Acts[i].Op; op >= 0 {
			actOrder = append(actOrder, int32(i))
			nActsOf[op]++
		}
	}
	slices.SortStableFunc(actOrder, func(x, y int32) int {
		return cmp.Compare(t.Acts[x].Launch, t.Acts[y].Launch)
	})
	apool := make([]int32, 0, len(actOrder))
	for i := range t.Ops {
		if n := nActsOf[i]; n > 0 {
			t.Ops[i].Acts = apool[len(apool) : len(apool) : len(apool)+int(n)]
			apool = apool[:len(apool)+int(n)]
		}
	}
	for _, ai := range actOrder {
		op := t.Acts[ai].Op
		t.Ops[op].Acts = append(t.Ops[op].Acts, ai)
	}

	linkFwdBwd(t, flows, thLo)
	buildSteps(t)

	// Warnings.
	warn := func(n int, format string) {
		if n > 0 {
			t.Warnings = append(t.Warnings, sprintf(format, n))
		}
	}
	if len(t.Acts) == 0 {
		t.Warnings = append(t.Warnings, "no GPU activities (kernels, memcpys, memsets) in the trace")
	}
	warn(t.stats.noLaunch, "%d GPU activities have no runtime launch event (launched before the profile window); their Op is -1")
	warn(noOp, "%d GPU activities were launched outside any CPU op; their Op is -1")
	warn(w.negTime, "%d negative ts/dur values clamped to 0")
	warn(w.noTime, "%d events without ts skipped")
	warn(w.badUTF8, "%d names with invalid UTF-8 repaired")
	warn(w.badArgs, "%d args values of an unexpected type ignored")
	warn(w.legacyOps, "legacy trace format: %d uncategorized events read as CPU ops")
	warn(w.otherFlows, "%d flow events with an invalid ts ignored")
	return t, ""
}

// nest computes parents for n intervals sorted by (group, start, -dur): each
// interval's parent is the innermost earlier interval of its group that it starts
// inside (a start equal to the parent's start counts as inside, also for zero
// durations).
func nest(n int, group func(int) int32, span func(int32) (int64, int64)) []int32 {
	parents := make([]int32, n)
	var stack []int32
	prevGroup := int32(-2)
	for i := 0; i < n; i++ {
		g := group(i)
		if g != prevGroup {
			stack = stack[:0]
			prevGroup = g
		}
		s, _ := span(int32(i))
		for len(stack) > 0 {
			ps, pd := span(stack[len(stack)-1])
			if s < ps+pd || s == ps {
				break
			}
			stack = stack[:len(stack)-1]
		}
		parents[i] = -1
		if len(stack) > 0 {
			parents[i] = stack[len(stack)-1]
		}
		stack = append(stack, int32(i))
	}
	return parents
}

// enclosing returns the innermost interval in [lo, hi) (sorted by start, nested
// with parent) that contains time ts, or -1.
func enclosing(lo, hi int32, ts int64, span func(int32) (int64, int64), parent func(int32) int32) int32 {
	if lo >= hi {
		return -1
	}
	j := lo + int32(sort.Search(int(hi-lo), func(k int) bool {
		s, _ := span(lo + int32(k))
		return s > ts
	})) - 1
	for j >= lo {
		s, d := span(j)
		if ts < s+d || ts == s {
			return j
		}
		j = parent(j)
	}
	return -1
}

// ranges returns, for n groups of items sorted by group, lo[g]..lo[g+1] the
// index range of group g.
func ranges(n, items int, group func(int) int32) []int32 {
	lo := make([]int32, n+1)
	for i := 0; i < items; i++ {
		lo[group(i)+1] = int32(i + 1)
	}
	for i := 1; i < len(lo); i++ {
		lo[i] = max(lo[i], lo[i-1])
	}
	return lo
}

// buildPython fills t.Python, grouped by (pid, tid) key and nested by time, and
// returns each key's index range in it.
func buildPython(t *Trace, chunks []*chunk, local [][]int32, keys []threadKey, keyThread []int32, n int, base int64) []int32 {
	if n == 0 {
		return nil
	}
	type pyKey struct {
		group, src, idx int32
		ts, dur         int64
	}
	pk := make([]pyKey, 0, n)
	for ci, c := range chunks {
		for i := range c.pys {
			p := &c.pys[i]
			pk = append(pk, pyKey{local[ci][p.thread], int32(ci), int32(i), p.ts, p.dur})
		}
	}
	pk = sortParallel(pk, func(x, y pyKey) int {
		if x.group != y.group {
			return cmp.Compare(x.group, y.group)
		}
		if x.ts != y.ts {
			return cmp.Compare(x.ts, y.ts)
		}
		if x.dur != y.dur {
			return cmp.Compare(y.dur, x.dur)
		}
		if x.src != y.src {
			return cmp.Compare(x.src, y.src)
		}
		return cmp.Compare(x.idx, y.idx)
	})
	t.Python = make([]PyFrame, len(pk))
	pyGroup := make([]int32, len(pk))
	parallelFor(len(pk), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			k := &pk[i]
			c := chunks[k.src]
			t.Python[i] = PyFrame{Name: c.names[c.pys[k.idx].name], Thread: keyThread[k.group], Start: k.ts + base, Dur: k.dur, Parent: -1}
			pyGroup[i] = k.group
		}
	})
	pk = nil
	for _, c := range chunks {
		c.pys = nil
	}
	span := func(i int32) (int64, int64) { return t.Python[i].Start, t.Python[i].Dur }
	parents := nest(len(t.Python), func(i int) int32 { return pyGroup[i] }, span)
	for i, p := range parents {
		t.Python[i].Parent = p
	}
	return ranges(len(keys), len(t.Python), func(i int) int32 { return pyGroup[i] })
}

// sortParallel sorts x by cmp: two halves concurrently, then a merge into a new
// slice. cmp must be a total order (ties broken by file position) so that the
// result is the same as a sequential sort.
func sortParallel[T any](x []T, cmp func(a, b T) int) []T {
	if len(x) < 1<<16 || runtime.GOMAXPROCS(0) < 2 {
		slices.SortFunc(x, cmp)
		return x
	}
	a, b := x[:len(x)/2], x[len(x)/2:]
	var wg sync.WaitGroup
	wg.Go(func() { slices.SortFunc(a, cmp) })
	slices.SortFunc(b, cmp)
	wg.Wait()
	out := make([]T, 0, len(x))
	for len(a) > 0 && len(b) > 0 {
		if cmp(b[0], a[0]) < 0 {
			out = append(out, b[0])
			b = b[1:]
		} else {
			out = append(out, a[0])
			a = a[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// parallelFor runs f over [0, n) split into GOMAXPROCS ranges.
func parallelFor(n int, f func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	if n < 1<<14 || w < 2 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		lo, hi := k*n/w, (k+1)*n/w
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}

// linkFwdBwd links forward ops to backward ops: by fwdbwd flows when the trace
// has any that bind, else by sequence number (latest-starting forward op, and the
// latest-starting, i.e. innermost, backward op of each sequence number).
// flow is one end of a forward->backward flow, on a Threads index (-1: none).
type flow struct {
	start  bool
	id     string
	thread int32
	ts     int64
}

func linkFwdBwd(t *Trace, flows []flow, thLo []int32) {
	link := func(f, b int32) {
		if f < 0 || b < 0 || f == b {
			return
		}
		t.Ops[f].Bwd = b
		t.Ops[b].Fwd = f
	}
	if len(flows) > 0 {
		// Bind each flow end to the op starting at (pid, tid, ts); innermost on ties.
		at := func(fl *flow) int32 {
			th := fl.thread
			if th < 0 {
				return -1
			}
			lo, hi := thLo[th], thLo[th+1]
			j := lo + int32(sort.Search(int(hi-lo), func(k int) bool { return t.Ops[lo+int32(k)].Start > fl.ts })) - 1
			if j >= lo && t.Ops[j].Start == fl.ts {
				return j
			}
			return -1
		}
		starts := map[string]int32{}
		for i := range flows {
			if flows[i].start {
				starts[flows[i].id] = at(&flows[i])
			}
		}
		n := 0
		for i := range flows {
			if !flows[i].start {
				if f, ok := starts[flows[i].id]; ok {
					if b := at(&flows[i]); f >= 0 && b >= 0 {
						link(f, b)
						n++
					}
				}
			}
		}
		if n > 0 {
			t.stats.fwdBwd = n
			return
		}
	}
	fwd := map[int64]int32{}
	bwd := map[int64]int32{}
	later := func(m map[int64]int32, seq int64, i int32) {
		if j, ok := m[seq]; !ok || t.Ops[i].Start > t.Ops[j].Start || (t.Ops[i].Start == t.Ops[j].Start && i > j) {
			m[seq] = i
		}
	}
	for i := range t.Ops {
		op := &t.Ops[i]
		if op.Seq < 0 || op.Kind != KindCPUOp {
			continue
		}
		if op.FwdThreadID > 0 {
			later(bwd, op.Seq, int32(i))
		} else {
			later(fwd, op.Seq, int32(i))
		}
	}
	for seq, b := range bwd {
		if f, ok := fwd[seq]; ok {
			link(f, b)
			t.stats.fwdBwd++
		}
	}
}

func buildSteps(t *Trace) {
	for i := range t.Ops {
		op := &t.Ops[i]
		if op.Kind == KindUserAnnotation && strings.HasPrefix(op.Name, "ProfilerStep#") {
			n, err := strconv.Atoi(op.Name[len("ProfilerStep#"):])
			if err != nil {
				n = -1
			}
			t.Steps = append(t.Steps, Step{Name: op.Name, Num: n, Start: op.Start, Dur: op.Dur})
		}
	}
	slices.SortStableFunc(t.Steps, func(a, b Step) int { return cmp.Compare(a.Start, b.Start) })
	if len(t.Steps) == 0 {
		lo, hi := int64(1<<63-1), int64(-1<<63)
		span := func(s, d int64) {
			lo = min(lo, s)
			hi = max(hi, s+d)
		}
		for i := range t.Ops {
			span(t.Ops[i].Start, t.Ops[i].Dur)
		}
		for i := range t.Acts {
			span(t.Acts[i].Start, t.Acts[i].Dur)
		}
		for i := range t.Python {
			span(t.Python[i].Start, t.Python[i].Dur)
		}
		if hi < lo {
			lo, hi = 0, 0
		}
		t.Steps = []Step{{Name: "whole trace", Num: -1, Start: lo, Dur: hi - lo}}
	}
	parallelFor(len(t.Ops), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			op := &t.Ops[i]
			j := sort.Search(len(t.Steps), func(k int) bool { return t.Steps[k].Start > op.Start }) - 1
			for ; j >= 0; j-- {
				s := &t.Steps[j]
				if op.Start < s.Start+s.Dur || op.Start == s.Start {
					op.Step = int32(j)
					break
				}
				if j > 0 && t.Steps[j-1].Start+t.Steps[j-1].Dur <= s.Start {
					break // steps do not overlap: no earlier one can contain it
				}
			}
		}
	})
}

// isDeviceSync reports a runtime call that waits for the whole device.
func isDeviceSync(name string) bool {
	switch name {
	case "cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize":
		return true
	}
	return false
}
