package patterns

import (
	"slices"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Totals is what the opportunities save together, set against the step: the chains of a
// non-overlapping set (two chains that share an op or a kernel would both count it), summed,
// as shares of GPU busy time and of the step time, and what fusion saves on the host
// when the step is host-bound.
type Totals struct {
	// EstSavingUs is the estimated GPU saving of the chains counted: the set of chains
	// sharing no op or kernel whose saving is largest, each chain's forward and, in a
	// training step, its backward (EstBackwardSavingUs of it). Instances is how many chains
	// that set holds; LeftOut how many found chains overlap it and are not counted.
	EstSavingUs         float64 `json:"est_saving_us"`
	EstBackwardSavingUs float64 `json:"est_backward_saving_us,omitempty"`
	Instances           int     `json:"instances"`
	LeftOut             int     `json:"overlapping_instances_left_out"`
	// SumOfPatternsUs is the opportunities' savings added up as listed, overlaps included
	// (what a reader adding the rows would get).
	SumOfPatternsUs    float64 `json:"sum_of_patterns_us"`
	SavingPctOfGPUBusy float64 `json:"saving_pct_of_gpu_busy"`
	// StepUs is the step time: the ProfilerStep#N spans added up, or the trace's span when
	// it has none (StepSource "profiler steps" or "trace span"); summed over ranks.
	StepUs     float64 `json:"step_us"`
	StepSource string  `json:"step_source"`
	// SavingPctOfStep is EstSavingUs over StepUs: the most the GPU saving can shorten
	// the step (none of it while the step is host-bound).
	SavingPctOfStep float64 `json:"saving_pct_of_step"`
	// GPUBusyInStepsUs is the time within the steps when the GPU ran anything.
	GPUBusyInStepsUs float64 `json:"gpu_busy_in_steps_us"`
	GPUBusyPctOfStep float64 `json:"gpu_busy_pct_of_step"`
	Host             Host    `json:"host"`
	// OptimizerSavingUs is what the optimizer steps' fused=True saves (the findings'
	// EstSavingUs added up), apart from the chains' EstSavingUs: another change, to the
	// optimizer's construction, and GPU time no chain holds; with its shares of GPU busy
	// time and of the step.
	OptimizerSavingUs        float64 `json:"optimizer_saving_us,omitempty"`
	OptimizerPctOfGPUBusy    float64 `json:"optimizer_saving_pct_of_gpu_busy,omitempty"`
	OptimizerSavingPctOfStep float64 `json:"optimizer_saving_pct_of_step,omitempty"`
	// MasterWeightsSavingUs is what keeping the GEMM weights in bf16 with fp32 masters in
	// the optimizer saves (the MasterWeights findings' EstSavingUs: autocast's weight casts),
	// another change again, with its shares.
	MasterWeightsSavingUs        float64 `json:"master_weights_saving_us,omitempty"`
	MasterWeightsPctOfGPUBusy    float64 `json:"master_weights_saving_pct_of_gpu_busy,omitempty"`
	MasterWeightsSavingPctOfStep float64 `json:"master_weights_saving_pct_of_step,omitempty"`
	// MultiheadAttentionSavingUs is what the drop-in MultiheadAttention saves (the
	// MultiheadAttention findings' EstSavingUs: the packed projection's copies less its own
	// stack), a change of modules, with its shares.
	MultiheadAttentionSavingUs        float64 `json:"multihead_attention_saving_us,omitempty"`
	MultiheadAttentionPctOfGPUBusy    float64 `json:"multihead_attention_saving_pct_of_gpu_busy,omitempty"`
	MultiheadAttentionSavingPctOfStep float64 `json:"multihead_attention_saving_pct_of_step,omitempty"`
}

// addOptimizer sets the optimizer steps' saving (us, all steps) and its shares.
func (tt *Totals) addOptimizer(us, busyUs float64) {
	tt.OptimizerSavingUs, tt.OptimizerPctOfGPUBusy, tt.OptimizerSavingPctOfStep = tt.shares(us, busyUs)
}

// addMasterWeights sets the master weights' saving (us, all steps) and its shares.
func (tt *Totals) addMasterWeights(us, busyUs float64) {
	tt.MasterWeightsSavingUs, tt.MasterWeightsPctOfGPUBusy, tt.MasterWeightsSavingPctOfStep = tt.shares(us, busyUs)
}

// addMultiheadAttention sets the drop-in MultiheadAttention's saving (us, all steps) and its
// shares.
func (tt *Totals) addMultiheadAttention(us, busyUs float64) {
	tt.MultiheadAttentionSavingUs, tt.MultiheadAttentionPctOfGPUBusy, tt.MultiheadAttentionSavingPctOfStep = tt.shares(us, busyUs)
}

// shares is a saving of us (all steps) with its shares of GPU busy time and of the step, each
// 0 where unknown; all 0 when us is not positive.
func (tt *Totals) shares(us, busyUs float64) (saving, pctBusy, pctStep float64) {
	if us <= 0 {
		return 0, 0, 0
	}
	if busyUs > 0 {
		pctBusy = round2(us / busyUs * 100)
	}
	if tt.StepUs > 0 {
		pctStep = round2(us / tt.StepUs * 100)
	}
	return round2(us), pctBusy, pctStep
}

// Host is the step seen from the CPU: the host costs measured in the trace, whether the
// step is host-bound, and what the counted chains' fusion saves on the host.
//
// A profiler recording shapes, stacks or an execution trace adds its own cost to every op
// it records, several times an op's own cost: raw idle gaps overstate how host-bound the
// step is. ProfilerOpUs measures that cost (the median host time of ops that do no work:
// leaf ops that launch nothing, such as views), and the judgement is made on the step with
// it taken out of every recorded event.
type Host struct {
	// Bound is true when the GPU is idle most of the step even with the profiler's
	// per-op cost taken out (GPUBusyPctNoProfiler below 50).
	Bound bool `json:"host_bound"`
	// LaunchUs is the median host time of one kernel launch call (cudaLaunchKernel,
	// cuLaunchKernelEx, ...), over Launches calls.
	LaunchUs float64 `json:"launch_us"`
	Launches int     `json:"launch_calls"`
	// OpUs is the median host time of one op of the counted chains (GEMMs, which a fused
	// call keeps, left out) beyond the launches it makes; OpNoProfilerUs the same with ProfilerOpUs taken out for each op recorded in it.
	OpUs           float64 `json:"op_us"`
	OpNoProfilerUs float64 `json:"op_without_profiler_us"`
	ProfilerOpUs   float64 `json:"profiler_op_us"`
	// RecordedEvents is the number of CPU ops recorded in the steps;
	// StepNoProfilerUs the step time less ProfilerOpUs for each of them (at least the GPU
	// busy time), GPUBusyPctNoProfiler the GPU busy share of that.
	RecordedEvents       int     `json:"recorded_events"`
	StepNoProfilerUs     float64 `json:"est_step_without_profiler_us"`
	GPUBusyPctNoProfiler float64 `json:"est_gpu_busy_pct_without_profiler"`
	// LaunchesRemoved and OpsRemoved are what fusing the counted chains that run without a
	// backward takes off the host (each chain's kernels less the fused call's, its ops less
	// one); EstSavingUs their cost, LaunchesRemoved*LaunchUs + OpsRemoved*OpUs, and
	// EstSavingNoProfilerUs with OpNoProfilerUs instead (the launch cost is left as
	// measured). TrainingChains counts the counted chains with a backward in the trace, left
	// out: a fused training call (a Python autograd.Function, its backward called by the
	// engine through Python) took more host time than eager's chain on the H200, 23-229 µs a
	// call more (docs/benchmarks/h200.md, "Where a training call's host time goes").
	LaunchesRemoved       int     `json:"launches_removed"`
	OpsRemoved            int     `json:"ops_removed"`
	TrainingChains        int     `json:"training_chains,omitempty"`
	EstSavingUs           float64 `json:"est_saving_us"`
	EstSavingNoProfilerUs float64 `json:"est_saving_without_profiler_us"`
	SavingPctOfStep       float64 `json:"saving_pct_of_step"`
	// GraphLaunched is true when most kernel time came from CUDA graph launches.
	GraphLaunched bool     `json:"graph_launched,omitempty"`
	Advice        []string `json:"advice,omitempty"`
}

// HostBoundBelowPct is the GPU busy share of the step (without the profiler's per-op cost)
// under which a step is called host-bound.
const HostBoundBelowPct = 50

// counted marks the instances of all (one per chain found) that the totals count: a set
// sharing no op or kernel (an op, or one nested in it, of two chains) with the largest
// estimated saving, launches removed breaking ties. Chains overlap in small groups (the
// LayerNorm of add_layernorm and layernorm_linear, the add of dropout_add and
// add_layernorm), each solved exactly; a group of more than maxExact chains greedily.
func counted(traces []*trace.Trace, all []ranked) []bool {
	type key struct {
		ti int
		op int32
	}
	parent := make([]int, len(all))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	owners := map[key][]int{}
	for i, rk := range all {
		t := traces[rk.ti]
		seen := map[int32]bool{}
		var walk func(id int32)
		walk = func(id int32) {
			if seen[id] {
				return
			}
			seen[id] = true
			k := key{rk.ti, id}
			for _, j := range owners[k] {
				if a, b := find(i), find(j); a != b {
					parent[a] = b
				}
			}
			owners[k] = append(owners[k], i)
			for _, c := range t.Ops[id].Children {
				walk(c)
			}
		}
		for _, id := range rk.in.Ops {
			walk(id)
		}
		// a GEMM or convolution whose bias the instance takes: that op alone (two instances
		// taking one bias overlap; the casts of its inputs nested in it are another's to take)
		for _, id := range rk.in.TakesBias {
			k := key{rk.ti, id}
			for _, j := range owners[k] {
				if a, b := find(i), find(j); a != b {
					parent[a] = b
				}
			}
			owners[k] = append(owners[k], i)
		}
	}
	adj := make([]map[int]bool, len(all))
	for _, js := range owners {
		for _, a := range js {
			for _, b := range js {
				if a != b {
					if adj[a] == nil {
						adj[a] = map[int]bool{}
					}
					adj[a][b] = true
				}
			}
		}
	}
	groups := map[int][]int{}
	for i := range all {
		r := find(i)
		groups[r] = append(groups[r], i)
	}
	keep := make([]bool, len(all))
	for _, g := range groups {
		for _, i := range bestSet(g, adj, all) {
			keep[i] = true
		}
	}
	return keep
}

// maxExact is the largest group of overlapping chains solved exactly.
const maxExact = 24

// setValue is what a set of chains saves: GPU time first, then launches.
type setValue struct {
	us       float64
	launches int
}

func (a setValue) add(b setValue) setValue {
	return setValue{a.us + b.us, a.launches + b.launches}
}

func (a setValue) better(b setValue) bool {
	if a.us != b.us {
		return a.us > b.us
	}
	return a.launches > b.launches
}

// valueOf is what fusing chain rk saves: its forward's GPU time and, in training, its
// backward's (the fused backward's saving), and the forward's launches.
func valueOf(rk ranked) setValue {
	v := setValue{launches: max(rk.est.kernels-rk.est.fusedKernels, 0)}
	if rk.est.modeled {
		v.us = max(rk.est.savingUs, 0) + max(rk.bwdSavingUs, 0)
	}
	return v
}

// bestSet returns the members of group g (indices into all) of a non-overlapping subset
// with the largest value.
func bestSet(g []int, adj []map[int]bool, all []ranked) []int {
	if len(g) == 1 {
		return g
	}
	if len(g) > maxExact {
		return greedySet(g, adj, all)
	}
	pos := map[int]int{}
	for p, i := range g {
		pos[i] = p
	}
	nb := make([]uint64, len(g))
	for p, i := range g {
		for j := range adj[i] {
			nb[p] |= 1 << pos[j]
		}
	}
	type result struct {
		v   setValue
		set uint64
	}
	memo := map[uint64]result{}
	var solve func(mask uint64) result
	solve = func(mask uint64) result {
		if mask == 0 {
			return result{}
		}
		if r, ok := memo[mask]; ok {
			return r
		}
		p := 0
		for mask&(1<<p) == 0 {
			p++
		}
		rest := mask &^ (1 << p)
		best := solve(rest) // without p
		with := solve(rest &^ nb[p])
		with.v = with.v.add(valueOf(all[g[p]]))
		with.set |= 1 << p
		if with.v.better(best.v) || (!best.v.better(with.v) && with.set < best.set) {
			best = with
		}
		memo[mask] = best
		return best
	}
	r := solve(1<<len(g) - 1)
	var out []int
	for p, i := range g {
		if r.set&(1<<p) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// greedySet takes the chains of g by value, largest first, skipping those that overlap a
// chain taken.
func greedySet(g []int, adj []map[int]bool, all []ranked) []int {
	order := slices.Clone(g)
	slices.SortStableFunc(order, func(a, b int) int {
		va, vb := valueOf(all[a]), valueOf(all[b])
		switch {
		case va.better(vb):
			return -1
		case vb.better(va):
			return 1
		}
		return a - b
	})
	taken := map[int]bool{}
	var out []int
	for _, i := range order {
		ok := true
		for j := range adj[i] {
			ok = ok && !taken[j]
		}
		if ok {
			taken[i] = true
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// stepTotals sets the totals of the counted chains (keep) against the traces' steps.
func stepTotals(traces []*trace.Trace, all []ranked, keep []bool, busyUs float64) *Totals {
	tt := &Totals{StepSource: "profiler steps"}
	var launchUs, opUs, opLowUs, profUs []float64
	var stepNoProf, busyInSteps, graphUs, kernelUs float64
	for ti, t := range traces {
		var stepNs int64
		for _, s := range t.Steps {
			stepNs += s.Dur
			if s.Num < 0 {
				tt.StepSource = "trace span"
			}
		}
		devices := map[int]bool{}
		for i := range t.Acts {
			a := &t.Acts[i]
			devices[a.Device] = true
			if a.Kind == trace.ActKernel {
				kernelUs += us(a.Dur)
				if a.Graph {
					graphUs += us(a.Dur)
				}
			}
		}
		busy := us(stepNs*int64(len(devices)) - t.IdleNs())
		tt.StepUs += us(stepNs)
		busyInSteps += busy
		l, n := t.LaunchHostNs()
		if n > 0 {
			launchUs = append(launchUs, us(l))
			tt.Host.Launches += n
		}
		prof := profilerOpUs(t)
		profUs = append(profUs, prof)
		rec := recordedInSteps(t)
		tt.Host.RecordedEvents += rec
		stepNoProf += max(us(stepNs)-float64(rec)*prof, busy)

		var ops, low []float64
		for i, rk := range all {
			if rk.ti != ti || !keep[i] {
				continue
			}
			for _, id := range topOps(t, rk.in.Ops) {
				if slices.Contains(rk.in.GEMMs, id) {
					continue // the fused call keeps the GEMM
				}
				launches, recorded := subtreeCounts(t, id)
				h := us(t.Ops[id].Dur) - float64(launches)*us(l)
				ops = append(ops, max(h, 0))
				low = append(low, max(h-float64(recorded)*prof, 0))
			}
		}
		if len(ops) > 0 {
			opUs = append(opUs, median(ops))
			opLowUs = append(opLowUs, median(low))
		}
	}
	for i, rk := range all {
		v := valueOf(rk)
		tt.SumOfPatternsUs += v.us
		if !keep[i] {
			tt.LeftOut++
			continue
		}
		tt.Instances++
		tt.EstSavingUs += v.us
		if rk.est.modeled {
			tt.EstBackwardSavingUs += max(rk.bwdSavingUs, 0)
		}
		if rk.bwd {
			tt.Host.TrainingChains++
			continue
		}
		tt.Host.LaunchesRemoved += v.launches
		tt.Host.OpsRemoved += max(len(topOps(traces[rk.ti], rk.in.Ops))-1, 0)
	}
	h := &tt.Host
	h.LaunchUs, h.OpUs, h.OpNoProfilerUs, h.ProfilerOpUs = median(launchUs), median(opUs), median(opLowUs), median(profUs)
	h.EstSavingUs = float64(h.LaunchesRemoved)*h.LaunchUs + float64(h.OpsRemoved)*h.OpUs
	h.EstSavingNoProfilerUs = float64(h.LaunchesRemoved)*h.LaunchUs + float64(h.OpsRemoved)*h.OpNoProfilerUs
	h.StepNoProfilerUs = stepNoProf
	h.GraphLaunched = kernelUs > 0 && graphUs >= 0.5*kernelUs
	tt.GPUBusyInStepsUs = busyInSteps
	if busyUs > 0 {
		tt.SavingPctOfGPUBusy = tt.EstSavingUs / busyUs * 100
	}
	if tt.StepUs > 0 {
		tt.SavingPctOfStep = tt.EstSavingUs / tt.StepUs * 100
		tt.GPUBusyPctOfStep = busyInSteps / tt.StepUs * 100
		h.SavingPctOfStep = h.EstSavingUs / tt.StepUs * 100
	}
	if stepNoProf > 0 {
		h.GPUBusyPctNoProfiler = busyInSteps / stepNoProf * 100
		h.Bound = h.GPUBusyPctNoProfiler < HostBoundBelowPct
	}
	if h.Bound {
		h.Advice = hostAdvice(h)
	}
	roundTotals(tt)
	return tt
}

// hostAdvice is what fits a host-bound step.
func hostAdvice(h *Host) []string {
	if h.GraphLaunched {
		return []string{
			"the kernels already run from CUDA graphs: the host time is outside them (Python, data loading, synchronizations); a larger batch gives each step more GPU work for the same host work",
		}
	}
	return []string{
		"capture the step in CUDA graphs (torch.cuda.graphs, or torch.compile(mode=\"reduce-overhead\")): one launch replays every kernel, the host cost of all launches and ops goes, not only the fused chains'",
		"a larger batch gives each launch more GPU work for the same host cost",
	}
}

func roundTotals(tt *Totals) {
	for _, p := range []*float64{&tt.EstSavingUs, &tt.EstBackwardSavingUs, &tt.SumOfPatternsUs, &tt.SavingPctOfGPUBusy, &tt.StepUs, &tt.SavingPctOfStep,
		&tt.GPUBusyInStepsUs, &tt.GPUBusyPctOfStep, &tt.Host.LaunchUs, &tt.Host.OpUs, &tt.Host.OpNoProfilerUs,
		&tt.Host.ProfilerOpUs, &tt.Host.StepNoProfilerUs, &tt.Host.GPUBusyPctNoProfiler, &tt.Host.EstSavingUs,
		&tt.Host.EstSavingNoProfilerUs, &tt.Host.SavingPctOfStep} {
		*p = round2(*p)
	}
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

// median of v, 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// topOps are the ops of ids not nested in another of them: the calls the chain makes.
func topOps(t *trace.Trace, ids []int32) []int32 {
	var out []int32
	for _, id := range ids {
		nested := false
		for p := t.Ops[id].Parent; p >= 0 && !nested; p = t.Ops[p].Parent {
			nested = slices.Contains(ids, p)
		}
		if !nested {
			out = append(out, id)
		}
	}
	return out
}

// subtreeCounts returns the GPU activities op id and the ops nested in it launched, and
// how many ops its subtree holds (itself included).
func subtreeCounts(t *trace.Trace, id int32) (launches, ops int) {
	op := &t.Ops[id]
	launches, ops = len(op.Acts), 1
	for _, c := range op.Children {
		l, o := subtreeCounts(t, c)
		launches += l
		ops += o
	}
	return launches, ops
}

// profilerOpUs is the median host time of the CPU ops that do no work (leaf ops that launch
// nothing: views, detach, empty): without a profiler about a microsecond, so nearly all of
// it is the profiler's cost of recording an op. 0 when the trace has none.
func profilerOpUs(t *trace.Trace) float64 {
	var d []float64
	for i := range t.Ops {
		op := &t.Ops[i]
		if op.Kind == trace.KindCPUOp && len(op.Children) == 0 && len(op.Acts) == 0 {
			d = append(d, us(op.Dur))
		}
	}
	return median(d)
}

// recordedInSteps counts the CPU ops that start within t's steps. (Python frames, which
// with_stack records, cost the profiler something too, which no event of the trace
// measures: they are left in, and a with_stack step reads more host-bound than it is.)
func recordedInSteps(t *trace.Trace) int {
	n := 0
	for i := range t.Ops {
		if t.Ops[i].Kind == trace.KindCPUOp && t.Ops[i].Step >= 0 {
			n++
		}
	}
	return n
}
