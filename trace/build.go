package trace

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// stats are counts kept beside the model for the summary helpers.
type stats struct {
	kinds    [numKinds]int
	events   int
	runtimes int
	launches int // runtime events whose name contains "Launch"
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

	// Merge the chunks in file order.
	ops := make([]opRec, 0, nOps)
	rts := make([]rtRec, 0, nRts)
	pys := make([]pyRec, 0, nPys)
	t.Acts = make([]Activity, 0, nActs)
	var flows []flowRec
	tnames := map[threadKey]string{}
	for _, c := range r.chunks {
		ops = append(ops, c.ops...)
		rts = append(rts, c.rts...)
		pys = append(pys, c.pys...)
		for i := range c.acts {
			t.Acts = append(t.Acts, c.acts[i].Activity)
		}
		flows = append(flows, c.flows...)
		for _, tn := range c.tnames {
			tnames[threadKey{tn.pid, tn.tid}] = tn.name
		}
		c.ops, c.rts, c.pys, c.acts = nil, nil, nil, nil
	}
	for i := range ops {
		ops[i].ts += base
		ops[i].fileOrder = int64(i)
	}
	for i := range rts {
		rts[i].ts += base
	}
	for i := range pys {
		pys[i].ts += base
	}
	for i := range t.Acts {
		t.Acts[i].Start += base
	}
	for i := range flows {
		flows[i].ts += base
	}
	t.stats.runtimes = len(rts)

	// Threads: those with ops, sorted by (pid, tid).
	thIdx := map[threadKey]int32{}
	for i := range ops {
		k := threadKey{ops[i].pid, ops[i].tid}
		if _, ok := thIdx[k]; !ok {
			thIdx[k] = 0
			t.Threads = append(t.Threads, Thread{Pid: k.pid, Tid: k.tid, Name: tnames[k]})
		}
	}
	slices.SortFunc(t.Threads, func(a, b Thread) int { return cmpKey(threadKey{a.Pid, a.Tid}, threadKey{b.Pid, b.Tid}) })
	for i, th := range t.Threads {
		thIdx[threadKey{th.Pid, th.Tid}] = int32(i)
	}

	// Ops sorted by (thread, start, -dur, Ev Idx, file order).
	opThread := make([]int32, len(ops))
	order := make([]int32, len(ops))
	for i := range ops {
		opThread[i] = thIdx[threadKey{ops[i].pid, ops[i].tid}]
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := &ops[a], &ops[b]
		if c := cmp.Compare(opThread[a], opThread[b]); c != 0 {
			return c
		}
		if c := cmp.Compare(x.ts, y.ts); c != 0 {
			return c
		}
		if c := cmp.Compare(y.dur, x.dur); c != 0 {
			return c
		}
		if c := cmp.Compare(x.evIdx, y.evIdx); c != 0 {
			return c
		}
		return cmp.Compare(x.fileOrder, y.fileOrder)
	})
	t.Ops = make([]Op, len(ops))
	for i, oi := range order {
		o := &ops[oi]
		t.Ops[i] = Op{Name: o.name, Kind: o.kind, Thread: opThread[oi], Start: o.ts, Dur: o.dur,
			Parent: -1, ExternalID: o.ext, RecordFunctionID: o.rf, EvIdx: o.evIdx, Seq: o.seq,
			FwdThreadID: o.fwd, Inputs: o.inputs, Bwd: -1, Fwd: -1, Py: -1, Step: -1}
	}
	ops = nil
	// Thread ranges in Ops.
	thLo := make([]int32, len(t.Threads)+1)
	for i := range t.Ops {
		thLo[t.Ops[i].Thread+1] = int32(i + 1)
	}
	for i := 1; i < len(thLo); i++ {
		thLo[i] = max(thLo[i], thLo[i-1])
	}

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

	// Python frames, grouped by (pid, tid), nested by time.
	buildPython(t, pys, thIdx)

	// Runtime events -> innermost enclosing op on their thread.
	rtOp := make([]int32, len(rts))
	corr := make(map[int64]int32, len(rts))
	for i := range rts {
		rt := &rts[i]
		if strings.Contains(rt.name, "Launch") {
			t.stats.launches++
		}
		rtOp[i] = -1
		if th, ok := thIdx[threadKey{rt.pid, rt.tid}]; ok {
			rtOp[i] = enclosing(thLo[th], thLo[th+1], rt.ts, opSpan, func(j int32) int32 { return t.Ops[j].Parent })
			if isDeviceSync(rt.name) {
				t.Threads[th].Syncs = append(t.Threads[th].Syncs, rt.ts)
			}
		}
		if rt.corr >= 0 {
			if _, dup := corr[rt.corr]; !dup {
				corr[rt.corr] = int32(i)
			}
		}
	}

	for i := range t.Threads {
		slices.Sort(t.Threads[i].Syncs)
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
		if a := &t.Acts[i]; a.Kind == ActKernel && a.Correlation >= 0 {
			perCorr[a.Correlation]++
		}
	}
	noOp := 0
	for i := range t.Acts {
		a := &t.Acts[i]
		if a.Correlation < 0 {
			continue
		}
		ri, ok := corr[a.Correlation]
		if !ok {
			t.stats.noLaunch++
			continue
		}
		rt := &rts[ri]
		a.Launch = rt.ts
		a.Op = rtOp[ri]
		if a.Op < 0 {
			noOp++
		}
		a.Graph = a.Kind == ActKernel && (perCorr[a.Correlation] > 1 || strings.Contains(rt.name, "GraphLaunch"))
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

	linkFwdBwd(t, flows, thIdx, thLo)
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

func buildPython(t *Trace, pys []pyRec, thIdx map[threadKey]int32) {
	if len(pys) == 0 {
		return
	}
	gIdx := map[threadKey]int32{}
	var keys []threadKey
	for i := range pys {
		k := threadKey{pys[i].pid, pys[i].tid}
		if _, ok := gIdx[k]; !ok {
			gIdx[k] = 0
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, cmpKey)
	for i, k := range keys {
		gIdx[k] = int32(i)
	}
	group := make([]int32, len(pys))
	order := make([]int32, len(pys))
	for i := range pys {
		group[i] = gIdx[threadKey{pys[i].pid, pys[i].tid}]
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		if c := cmp.Compare(group[a], group[b]); c != 0 {
			return c
		}
		if c := cmp.Compare(pys[a].ts, pys[b].ts); c != 0 {
			return c
		}
		return cmp.Compare(pys[b].dur, pys[a].dur)
	})
	t.Python = make([]PyFrame, len(pys))
	pyGroup := make([]int32, len(pys))
	for i, pi := range order {
		p := &pys[pi]
		th, ok := thIdx[threadKey{p.pid, p.tid}]
		if !ok {
			th = -1
		}
		t.Python[i] = PyFrame{Name: p.name, Thread: th, Start: p.ts, Dur: p.dur, Parent: -1}
		pyGroup[i] = group[pi]
	}
	span := func(i int32) (int64, int64) { return t.Python[i].Start, t.Python[i].Dur }
	parents := nest(len(t.Python), func(i int) int32 { return pyGroup[i] }, span)
	for i, p := range parents {
		t.Python[i].Parent = p
	}
	// Group ranges, then Op.Py.
	lo := make([]int32, len(keys)+1)
	for i := range t.Python {
		lo[pyGroup[i]+1] = int32(i + 1)
	}
	for i := 1; i < len(lo); i++ {
		lo[i] = max(lo[i], lo[i-1])
	}
	parent := func(i int32) int32 { return t.Python[i].Parent }
	for i := range t.Ops {
		op := &t.Ops[i]
		th := &t.Threads[op.Thread]
		g, ok := gIdx[threadKey{th.Pid, th.Tid}]
		if !ok {
			continue
		}
		op.Py = enclosing(lo[g], lo[g+1], op.Start, span, parent)
	}
}

// linkFwdBwd links forward ops to backward ops: by fwdbwd flows when the trace
// has any that bind, else by sequence number (latest-starting forward op, and the
// latest-starting, i.e. innermost, backward op of each sequence number).
func linkFwdBwd(t *Trace, flows []flowRec, thIdx map[threadKey]int32, thLo []int32) {
	link := func(f, b int32) {
		if f < 0 || b < 0 || f == b {
			return
		}
		t.Ops[f].Bwd = b
		t.Ops[b].Fwd = f
	}
	if len(flows) > 0 {
		// Bind each flow end to the op starting at (pid, tid, ts); innermost on ties.
		at := func(fl *flowRec) int32 {
			th, ok := thIdx[threadKey{fl.pid, fl.tid}]
			if !ok {
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
	for i := range t.Ops {
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
}

// isDeviceSync reports a runtime call that waits for the whole device.
func isDeviceSync(name string) bool {
	switch name {
	case "cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize":
		return true
	}
	return false
}
