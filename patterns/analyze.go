package patterns

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Options control Analyze.
type Options struct {
	Top     int    // keep the first Top opportunities (by saving); 0 keeps all
	Pattern string // only this pattern id; "" for all
	// ET gives, per trace, its execution trace: dataflow then comes from exact
	// tensor ids instead of shape inference.
	ET   map[*trace.Trace]*trace.ExecTrace
	Cost CostModel // zero fields take DefaultCostModel's values (or are calibrated, see CostModel)
}

// Report is the analysis of one or more traces (ranks of one run), marshalled
// with encoding/json to the contract of docs/patterns.md.
type Report struct {
	Trace         TraceSummary   `json:"trace"`
	Ranks         []TraceSummary `json:"ranks,omitempty"` // one per trace when several were merged
	Opportunities []Opportunity  `json:"opportunities"`
	Calibration   []Calibration  `json:"calibration,omitempty"` // one per trace
	// Optimizers are optimizer steps whose updates are not fused (per-tensor loops, foreach).
	Optimizers []OptimizerFinding `json:"optimizers,omitempty"`
	// MasterWeights are the training steps whose autocast casts fp32 GEMM weights to bf16
	// and their gradients back (one a trace that has such casts).
	MasterWeights []MasterWeights `json:"master_weights,omitempty"`
	// MultiheadAttention are the traces whose nn.MultiheadAttention splits its packed q/k/v
	// projection with copies (one a trace that has such splits).
	MultiheadAttention []MultiheadAttention `json:"multihead_attention,omitempty"`
	// Totals sets the opportunities together (overlapping chains counted once) against
	// the step; nil in analyses from before it was recorded and when nothing was found.
	Totals *Totals `json:"totals,omitempty"`
	// Coverage is the share of the memory-bound kernel time the chains found claim; nil in
	// analyses from before it was recorded and when the traces hold no memory-bound kernel.
	Coverage *Coverage `json:"coverage,omitempty"`
	// GenericChains are chains of memory-bound ops outside the catalog (detection only),
	// by GPU time; nil when none was found or when one pattern was asked for.
	GenericChains []GenericChain `json:"generic_chains,omitempty"`
	Notes         []string       `json:"notes,omitempty"`
}

// TraceSummary describes an analyzed trace (or, in Report.Trace when several
// were merged, all of them: paths joined, kernels and busy time summed, steps of
// the first).
type TraceSummary struct {
	Path      string  `json:"path"`
	Device    string  `json:"device"`
	Rank      int     `json:"rank"`
	Steps     int     `json:"steps"`
	GPUBusyUs float64 `json:"gpu_busy_us"`
	Kernels   int     `json:"kernels"`
	Dataflow  string  `json:"dataflow,omitempty"` // "inferred" (shapes) or "execution trace"
	// StepUs is the rank's step time (its ProfilerStep spans, or its span), set in
	// Report.Ranks only: the merged Trace's is Totals.StepUs.
	StepUs float64 `json:"step_us,omitempty"`
}

// Opportunity is one pattern's findings.
type Opportunity struct {
	Pattern           string  `json:"pattern"`
	Instances         int     `json:"instances"`
	BackwardInstances int     `json:"backward_instances"`
	GPUTimeUs         float64 `json:"gpu_time_us"`
	EstFusedUs        float64 `json:"est_fused_us"`
	EstSavingUs       float64 `json:"est_saving_us"`
	SavingPct         float64 `json:"saving_pct_of_gpu_busy"`
	BackwardGPUTimeUs float64 `json:"backward_gpu_time_us"`
	// EstFusedBackwardUs is the fused backward of the instances with a backward in the trace
	// (a training step): the cost model's (CostModel.BackwardUs, from the backward shape
	// BackwardShapeOf derives of each instance's kernel case), or their traced backward where
	// the pattern saves nothing in training or no backward shape is derived.
	// EstBackwardSavingUs is BackwardGPUTimeUs less it (each instance's at least 0). Both 0
	// (left out) on an inference trace; EstFusedUs and EstSavingUs stay the forward's.
	EstFusedBackwardUs  float64 `json:"est_fused_backward_us,omitempty"`
	EstBackwardSavingUs float64 `json:"est_backward_saving_us,omitempty"`
	// Kernels is the number of kernels the forward instances launched;
	// LaunchesSaved how many launches one fused kernel per instance removes, and
	// EstLaunchSavingUs their host-side cost (CostModel.LaunchUs each).
	Kernels           int     `json:"kernels"`
	LaunchesSaved     int     `json:"launches_saved"`
	EstLaunchSavingUs float64 `json:"est_launch_saving_us"`
	Untimed           int     `json:"untimed_instances,omitempty"` // instances whose ops launched no GPU work in the trace
	// CountedInstances and CountedSavingUs are the instances (and their saving) in the
	// non-overlapping set that Report.Totals sums; fewer than Instances where chains of
	// another pattern share their ops and save more.
	CountedInstances int          `json:"counted_instances"`
	CountedSavingUs  float64      `json:"counted_saving_us"`
	Fused            string       `json:"fused_kernel"`
	Advice           []string     `json:"advice,omitempty"`
	Shapes           []ShapeGroup `json:"shapes"`
	PerRank          []RankShare  `json:"per_rank,omitempty"`
}

// ShapeGroup is one (dims, dtype, params) group of instances: what a kernel
// generator needs, with its share of the cost.
type ShapeGroup struct {
	Dims        [][]int64 `json:"dims"`
	DType       DType     `json:"dtype"`
	Instances   int       `json:"instances"`
	Params      Params    `json:"params"`
	Elems       int64     `json:"elems"`
	Rows        int64     `json:"rows,omitempty"`
	Cols        int64     `json:"cols,omitempty"`
	Bytes       int64     `json:"min_bytes_per_instance"`
	GPUTimeUs   float64   `json:"gpu_time_us"`
	EstFusedUs  float64   `json:"est_fused_us"`
	EstSavingUs float64   `json:"est_saving_us"`
	SavingPct   float64   `json:"saving_pct_of_gpu_busy"`
	// BackwardGPUTimeUs, EstFusedBackwardUs and EstBackwardSavingUs are the group's part of
	// the opportunity's (its instances' backward ops in the trace, their fused backward);
	// left out on an inference trace.
	BackwardGPUTimeUs   float64  `json:"backward_gpu_time_us,omitempty"`
	EstFusedBackwardUs  float64  `json:"est_fused_backward_us,omitempty"`
	EstBackwardSavingUs float64  `json:"est_backward_saving_us,omitempty"`
	Sources             []string `json:"sources,omitempty"` // python source lines (with_stack traces)
	// Valid is false when a dim or the dtype is out of range for a kernel (e.g.
	// int64 inputs, a zero dim): the group is reported, never generated.
	Valid bool `json:"valid"`
	// InAttention is how many of the instances lie inside an attention instance the
	// attention template expresses (a mask_softmax within a whole attention chain): its
	// folder covers them, and codegen generates this group only for the others.
	InAttention int `json:"in_attention,omitempty"`
}

// RankShare is one rank's part of an opportunity.
type RankShare struct {
	Rank        int     `json:"rank"`
	Instances   int     `json:"instances"`
	GPUTimeUs   float64 `json:"gpu_time_us"`
	EstSavingUs float64 `json:"est_saving_us"`
	// EstBackwardSavingUs is the rank's part of the opportunity's (0 in inference).
	EstBackwardSavingUs float64 `json:"est_backward_saving_us,omitempty"`
}

// ranked is one instance with its cost, before grouping.
type ranked struct {
	in   *Instance
	est  estimate
	bwd  bool    // the instance has backward ops in the trace (a training step)
	bwUs float64 // their GPU time
	// bwdFusedUs is the fused backward's estimate (bwUs where nothing is saved),
	// bwdSavingUs bwUs less it (at least 0): what valueOf adds to the forward's saving.
	bwdFusedUs, bwdSavingUs float64
	src                     string
	rank                    int
	ti                      int // index of its trace
}

// rankInstance is instance in of trace t with its forward's estimate (m calibrated on t, on
// device) and, when it runs in training (backward ops in the trace), its backward's: the
// cost model's fused backward of the kernel case the instance maps to (estimateBackward).
// A pattern that saves nothing in training (noTrainingSaving) keeps the eager chain forward
// and backward. bwdMissed says that the instance's backward saves nothing because no
// backward shape could be derived of it.
func rankInstance(m *CostModel, t *trace.Trace, in *Instance, device string) (rk ranked, bwdMissed bool) {
	rk = ranked{in: in, est: estimateInstance(m, t, in)}
	rk.bwd, rk.bwUs = backward(t, in)
	if !rk.bwd {
		return rk, false
	}
	rk.bwdFusedUs = rk.bwUs
	if patternByID(in.Pattern).noTrainingSaving() != "" {
		// in training the module runs the eager chain (or the fused one saves nothing):
		// nothing saved, nothing removed
		rk.est.fusedUs, rk.est.savingUs, rk.est.fusedKernels = rk.est.gpuUs, 0, rk.est.kernels
		return rk, false
	}
	if rk.est.modeled && patternByID(in.Pattern).GEMM == GEMMStats {
		// a training step refolds the weights after every optimizer update: the forward's
		// fused time holds that pass
		if us, ok := refoldUs(m, in, device); ok {
			rk.est.fusedUs += us
			rk.est.savingUs = max(rk.est.gpuUs-rk.est.fusedUs, 0)
		}
	}
	if p := patternByID(in.Pattern); p.eagerBackward != nil && p.eagerBackward(in) {
		return rk, false // the template's backward is eager's ops here: nothing saved
	}
	if !rk.est.modeled || rk.bwUs <= 0 || patternByID(in.Pattern).BackwardAsEager != "" {
		// no bandwidth (the forward is not judged either), an untimed backward, or a backward
		// counted as eager's (the pattern says why), but for a convolution's bias the kernel
		// takes (Params.ConvBias): its gradient's sum, which the fused backward makes in one
		// read of the norm's d_input (_col_sums)
		if rk.est.modeled && rk.bwUs > 0 && in.Params.ConvBias {
			if taken := takenBiasUs(t, in); taken > 0 {
				if us, ok := m.RowPassUs(device, in.Elems*in.DType.Size()); ok && us < taken {
					rk.bwdFusedUs = rk.bwUs - taken + us
					rk.bwdSavingUs = taken - us
				}
			}
		}
		return rk, false
	}
	us, ok := estimateBackward(m, t, in, device)
	if !ok {
		return rk, true
	}
	rk.bwdFusedUs = min(us, rk.bwUs)
	rk.bwdSavingUs = rk.bwUs - rk.bwdFusedUs
	return rk, false
}

// refoldUs is the cost model's time for the refold of a GEMM-after-a-LayerNorm instance's
// weights in a training step (BackwardShape.FoldBytes as one row kernel); ok is false when
// the instance maps to no kernel case.
func refoldUs(m *CostModel, in *Instance, device string) (float64, bool) {
	p := patternByID(in.Pattern)
	c, why := p.Case(ShapeGroup{Dims: in.Dims, DType: in.DType, Params: in.Params, Elems: in.Elems,
		Rows: in.Rows, Cols: in.Cols, Bytes: in.Bytes, Valid: validGroup(in)})
	if why != "" {
		return 0, false
	}
	_, k, n, es, ok := ForwardCase{Pattern: in.Pattern, Case: c}.GEMMDims()
	if !ok {
		return 0, false
	}
	return m.RowPassUs(device, 2*n*k*es)
}

// estimateBackward is the cost model's fused backward of instance in (m calibrated on its
// trace): the instance mapped to its kernel case (Pattern.Case), the backward shape derived
// of it as the benchmark derives one of a forward case (BackwardShapeOf: from the forward's
// bytes, the GEMM time from the trace), CostModel.BackwardUs of that. ok is false when the
// instance maps to no case or the pattern has no backward model. An output cast for several
// GEMMs (Instance.CastReaders) adds the engine's sums of its gradients.
func estimateBackward(m *CostModel, t *trace.Trace, in *Instance, device string) (float64, bool) {
	p := patternByID(in.Pattern)
	c, why := p.Case(ShapeGroup{Dims: in.Dims, DType: in.DType, Params: in.Params, Elems: in.Elems,
		Rows: in.Rows, Cols: in.Cols, Bytes: in.Bytes, Valid: validGroup(in)})
	if why != "" || len(c.Shapes) == 0 {
		return 0, false
	}
	f := ForwardCase{Pattern: in.Pattern, Case: c, Shape: c.Shapes[0], Bytes: in.Bytes, GemmUs: shapeOf(t, in).GemmUs}
	s, ok := BackwardShapeOf(f, 0, false)
	if !ok {
		return 0, false
	}
	us, _, ok := m.BackwardUs(device, s)
	if ok && in.CastReaders > 1 {
		// the engine's sums of the output's gradients from its GEMMs, in the 16-bit type the
		// kernel writes (eager's fp32 sums after the casts' backward are the instance's)
		es := in.Params.OutDType.Size()
		add, _ := m.PointwisePassUs(device, 3*in.Elems*es, in.Elems*es)
		us += float64(in.CastReaders-1) * add
	}
	return us, ok
}

// Analyze finds the catalog's patterns in traces (the ranks of one run) and
// estimates what fusing them saves.
func Analyze(traces []*trace.Trace, opts Options) (*Report, error) {
	if len(traces) == 0 {
		return nil, fmt.Errorf("patterns: no trace to analyze")
	}
	if opts.Pattern != "" {
		known := false
		for _, p := range catalog {
			known = known || p.ID == opts.Pattern
		}
		if !known {
			return nil, fmt.Errorf("patterns: unknown pattern %q", opts.Pattern)
		}
	}
	cm := opts.Cost.withDefaults()
	r := &Report{}
	var all []ranked
	trainingOnly := map[string]int{} // instances of forward-only patterns in training, per pattern
	bwdAsEager := map[string]int{}   // instances in training whose backward is counted as eager's
	convBias := map[string]int{}     // of those, the instances that take a convolution's bias
	noBwdShape := map[string]int{}   // instances in training whose backward could not be estimated
	var busyUs float64
	optClaims := make([]map[string]bool, len(traces)) // per trace: the optimizer classes whose fused step saves time
	inferred := false                                 // a trace's dataflow inferred from shapes (no execution trace)
	var optSavingUs float64
	masterClaims := make([]*tiedWeights, len(traces)) // per trace where its weights' casts go with MasterAdamW: the tied weights that stay
	var masterSavingUs float64
	mhaClaims := make([][]int32, len(traces)) // per trace: the kernels the drop-in MultiheadAttention removes, where offered
	var mhaSavingUs float64
	var generic []GenericChain
	var genericAll []ranked // generic chains' instances: in the totals and the coverage
	genericNoBwd := 0       // their instances in training whose program has no fused backward
	notes := map[string]bool{}
	note := func(s string) {
		if !notes[s] {
			notes[s] = true
			r.Notes = append(r.Notes, s)
		}
	}
	for ti, t := range traces {
		s := summarize(t)
		rank := t.Rank
		if rank < 0 {
			rank = ti
		}
		s.Rank = rank
		if len(traces) > 1 {
			for _, st := range t.Steps {
				s.StepUs += us(st.Dur)
			}
			s.StepUs = round1(s.StepUs)
		}
		g := newGraph(t)
		if et := opts.ET[t]; et != nil {
			if err := g.fromET(et); err != nil {
				return nil, fmt.Errorf("patterns: %s: %w", t.Path, err)
			}
			s.Dataflow = "execution trace"
		} else {
			g.infer()
			s.Dataflow = "inferred"
			inferred = true
			if g.passes > 0 {
				if s.Steps == 0 {
					s.Steps = g.passes // the iterations of an unmarked inference loop
				}
				note(fmt.Sprintf("%s: %d forward passes told apart by the host time between them (the ops repeat one unit and nothing else marks the iterations); no value is inferred to flow from one pass to the next",
					t.Path, g.passes))
			}
		}
		m, cal := calibrate(cm, g, s.Device)
		r.Calibration = append(r.Calibration, cal)
		r.Ranks = append(r.Ranks, s)
		busyUs += s.GPUBusyUs
		shapes := 0
		for n := range g.nodes {
			if len(g.ins(int32(n))) > 0 {
				shapes++
			}
		}
		if len(g.nodes) == 0 {
			note(fmt.Sprintf("%s: no CPU ops: nothing to match", t.Path))
			continue
		}
		if shapes == 0 {
			note(fmt.Sprintf("%s: no input shapes recorded (profile with record_shapes=True): patterns cannot be matched", t.Path))
			continue
		}
		if s.Kernels == 0 {
			note(fmt.Sprintf("%s: no GPU kernels in the trace: instances are counted but GPU time and savings cannot be judged", t.Path))
		}
		if cal.BandwidthSource == "none" {
			note(fmt.Sprintf("%s: unknown device %q and too few large memory-bound kernels to calibrate bandwidth: fused times are not estimated (set CostModel.BandwidthGBs)", t.Path, s.Device))
		}
		var join map[int32]*trace.ETNode
		if et := opts.ET[t]; et != nil {
			join = et.Join(t)
		}
		for _, f := range optimizerSteps(t, join) {
			if len(traces) > 1 {
				f.Rank = rank
			}
			r.Optimizers = append(r.Optimizers, f)
			if f.EstSavingUs > 0 {
				if optClaims[ti] == nil {
					optClaims[ti] = map[string]bool{}
				}
				optClaims[ti][f.Optimizer] = true
				optSavingUs += f.EstSavingUs
			}
		}
		tied := newTiedWeights(t, join)
		if mw := masterWeights(t, s.Steps, tied); mw != nil {
			if len(traces) > 1 {
				mw.Rank = rank
			}
			r.MasterWeights = append(r.MasterWeights, *mw)
			if mw.EstSavingUs > 0 {
				masterClaims[ti] = tied
				masterSavingUs += mw.EstSavingUs
			}
		}
		if f, acts := multiheadAttention(t, s.Steps, m); f != nil {
			if len(traces) > 1 {
				f.Rank = rank
			}
			r.MultiheadAttention = append(r.MultiheadAttention, *f)
			if f.EstSavingUs > 0 {
				mhaClaims[ti] = acts
				mhaSavingUs += f.EstSavingUs
			}
		}
		found := detect(g, opts.Pattern)
		if n := takeOutputCasts(g, found); n > 0 {
			note(fmt.Sprintf("%s: %d norm outputs that GEMMs cast under autocast keep those casts (the kernel could write the cast value): from the Kineto trace alone, without a backward whose gradient sums tell (an inference step), a pre-norm block, x + f(norm(x)), cannot be told from a post-norm one (BERT's), whose residual add reads the norm's output too; with an execution trace (-et) the dataflow says which",
				t.Path, n))
		}
		if opts.Pattern == "" {
			cs, rks, nb := genericRanked(g, claimedOps(found), &m, s.Device, ti, rank)
			genericNoBwd += nb
			generic = append(generic, cs...)
			genericAll = append(genericAll, rks...)
		}
		for _, in := range found {
			rk, missed := rankInstance(&m, t, in, s.Device)
			rk.rank, rk.ti, rk.src = rank, ti, sourceLine(t, in.Anchor)
			if rk.bwd && patternByID(in.Pattern).noTrainingSaving() != "" {
				trainingOnly[in.Pattern]++
			} else if rk.bwd && patternByID(in.Pattern).BackwardAsEager != "" {
				bwdAsEager[in.Pattern]++
				if in.Params.ConvBias {
					convBias[in.Pattern]++
				}
			}
			if missed {
				noBwdShape[in.Pattern]++
			}
			all = append(all, rk)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bwdAsEager)) {
		but := ""
		if n := convBias[id]; n > 0 {
			but = fmt.Sprintf(" (%d of them take a convolution's bias, conv_bias: their backward saves eager's sum of its gradient over the permuted output gradient, against one read of the norm's input gradient)", n)
		}
		note(fmt.Sprintf("%s: %d of its instances run in training; their backward is counted at its traced time, with no saving%s: %s",
			id, bwdAsEager[id], but, patternByID(id).BackwardAsEager))
	}
	for _, id := range slices.Sorted(maps.Keys(noBwdShape)) {
		note(fmt.Sprintf("%s: %d of its instances run in training, but no backward shape could be derived of their kernel case: their backward is counted with no saving",
			id, noBwdShape[id]))
	}
	if genericNoBwd > 0 {
		note(fmt.Sprintf("chains outside the catalog: %d of their instances run in training and end in a reduction, whose fused kernel is forward only: they are counted with no saving",
			genericNoBwd))
	}
	for _, id := range slices.Sorted(maps.Keys(trainingOnly)) {
		p := patternByID(id)
		if p.ForwardOnly {
			note(fmt.Sprintf("%s: forward only (no backward): %d of its instances run in training (they have a backward in the trace), where its module runs the eager chain: they are counted with no saving",
				id, trainingOnly[id]))
			continue
		}
		note(fmt.Sprintf("%s: %d of its instances run in training (they have a backward in the trace), where it is %s: they are counted with no saving",
			id, trainingOnly[id], p.noTrainingSaving()))
	}
	if inferred && (len(all) > 0 || len(genericAll) > 0) {
		note("dataflow inferred from op order and shapes (no execution trace): an op's input is linked to the newest earlier value of its shape and type, so where several such values are alive at once (rotary slices, mask and position index arithmetic, norms written out in ops, decoding loops) a chain can be split, joined or missed (on fifteen recorded models, the catalog's instances of four: docs/recording.md). For exact dataflow, record an execution trace in the same run (torch.profiler.ExecutionTraceObserver) and pass it with -et")
	}
	// the totals and the coverage count generic chains as catalog ones; the opportunities
	// list the catalog's (generic chains have their own list)
	withGeneric := append(slices.Clip(all), genericAll...)
	keep := counted(traces, withGeneric)
	if len(withGeneric) > 0 || optSavingUs > 0 || masterSavingUs > 0 || mhaSavingUs > 0 {
		r.Totals = stepTotals(traces, withGeneric, keep, busyUs)
		r.Totals.addOptimizer(optSavingUs, busyUs)
		r.Totals.addMasterWeights(masterSavingUs, busyUs)
		r.Totals.addMultiheadAttention(mhaSavingUs, busyUs)
	}
	r.Coverage = coverage(traces, withGeneric, keep, optClaims, masterClaims, mhaClaims)
	if pairs := overlaps(withGeneric); len(pairs) > 0 {
		note(fmt.Sprintf("chains of several patterns share ops (%s): their savings overlap, so the patterns' rows do not add up; the total counts the %d chains of the non-overlapping set that saves most (%d overlapping chains left out)",
			strings.Join(pairs, ", "), r.Totals.Instances, r.Totals.LeftOut))
	}
	r.Trace = merge(r.Ranks)
	if len(r.Ranks) == 1 {
		r.Ranks = nil
	}
	r.Opportunities = group(all, keep[:len(all)], busyUs, cm.LaunchUs, len(traces) > 1)
	for i := range r.Opportunities {
		o := &r.Opportunities[i]
		if o.Untimed > 0 && o.Untimed == o.Instances {
			note(fmt.Sprintf("%s: its ops launched no GPU work in the trace: GPU time and saving not judged", o.Pattern))
		}
	}
	r.GenericChains = groupGenericChains(generic)
	if opts.Top > 0 && len(r.Opportunities) > opts.Top {
		r.Opportunities = r.Opportunities[:opts.Top]
	}
	if r.Opportunities == nil {
		r.Opportunities = []Opportunity{}
	}
	return r, nil
}

// summarize describes t. Steps are the ProfilerStep#N spans; without them the
// optimizer steps (Optimizer.step#... annotations) on the busiest thread; 0 when
// the trace shows neither (an inference loop without profiler steps).
// overlaps lists the pattern pairs whose instances share an op (e.g. the
// LayerNorm of add_layernorm and layernorm_linear), sorted.
func overlaps(all []ranked) []string {
	type key struct {
		rank int
		op   int32
	}
	owner := map[key]string{}
	set := map[string]bool{}
	for _, rk := range all {
		for _, id := range slices.Concat(rk.in.Ops, rk.in.TakesBias) {
			k := key{rk.rank, id}
			if p, ok := owner[k]; ok && p != rk.in.Pattern {
				a, b := p, rk.in.Pattern
				if b < a {
					a, b = b, a
				}
				set[a+"/"+b] = true
				continue
			}
			owner[k] = rk.in.Pattern
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func summarize(t *trace.Trace) TraceSummary {
	s := TraceSummary{Path: t.Path, Steps: len(t.Steps), Kernels: t.KernelCount(), GPUBusyUs: round1(float64(t.GPUBusyNs()) / 1e3)}
	if len(t.Steps) == 1 && t.Steps[0].Num < 0 {
		s.Steps = 0 // only the synthetic whole-trace step
		opt := map[int32]int{}
		for i := range t.Ops {
			if op := &t.Ops[i]; op.Kind == trace.KindUserAnnotation && strings.HasPrefix(op.Name, "Optimizer.step#") {
				opt[op.Thread]++
			}
		}
		for _, n := range opt {
			s.Steps = max(s.Steps, n)
		}
	}
	if len(t.Devices) > 0 {
		s.Device = t.Devices[0].Name
	}
	return s
}

func merge(rs []TraceSummary) TraceSummary {
	if len(rs) == 1 {
		return rs[0]
	}
	m := rs[0]
	var paths []string
	m.Kernels, m.GPUBusyUs = 0, 0
	for _, r := range rs {
		paths = append(paths, r.Path)
		m.Kernels += r.Kernels
		m.GPUBusyUs += r.GPUBusyUs
	}
	m.Path = strings.Join(paths, ", ")
	m.Rank = -1
	m.GPUBusyUs = round1(m.GPUBusyUs)
	return m
}

// evaluateFunction prefixes the autograd engine's record of one backward node's run.
const evaluateFunction = "autograd::engine::evaluate_function: "

// bwdOps is backward node b (an Op.Bwd) with what the autograd engine runs for its
// gradients after the node itself, inside its "autograd::engine::evaluate_function: NAME"
// op where the trace has one: validate_outputs' sum of a broadcast input's gradient back to
// the input's shape (a bias', a per-channel scale's) and cast of a gradient to its input's
// dtype. A fused backward computes those in its own pass, so they are the node's. The
// engine's other work there, the gradients of a tensor several ops read added up
// (aten::add_, aten::add), stays with or without fusion and is left out.
func bwdOps(t *trace.Trace, b int32) []int32 {
	out := []int32{b}
	p := t.Ops[b].Parent
	if p < 0 || t.Ops[p].Name != evaluateFunction+t.Ops[b].Name {
		return out
	}
	for _, c := range t.Ops[p].Children {
		if n := t.Ops[c].Name; n == "aten::sum" || n == "aten::to" {
			out = append(out, c)
		}
	}
	return out
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
func round2(x float64) float64 { return math.Round(x*100) / 100 }

// backward finds the backward ops the instance's forward ops caused (Op.Bwd on
// the ops or their descendants) and sums their GPU time, each with what the engine runs
// for its gradients after the node (bwdOps), and after the backward of a cast the instance
// took, the sums of that value's gradients (accumulations; for GEMMs run as one over
// concatenated weights, concatSums).
func backward(t *trace.Trace, in *Instance) (bool, float64) {
	seen := map[int32]bool{}
	var ns int64
	var walk func(id int32)
	walk = func(id int32) {
		op := &t.Ops[id]
		if b := op.Bwd; b >= 0 && !seen[b] {
			seen[b] = true
			ops := bwdOps(t, b)
			if tookCast(t, in, id) { // the sums of its input's gradients: the fused backward's
				ops = append(ops, accumulations(t, b)...)
			}
			for _, id := range ops {
				n, _ := subtreeActs(t, id)
				ns += n
			}
		}
		for _, c := range op.Children {
			walk(c)
		}
	}
	for _, id := range in.Ops {
		walk(id)
	}
	ns += takenBiasNs(t, in, seen)
	for _, id := range concatSums(t, in) { // the sums its concatenated GEMM makes needless
		n, _ := subtreeActs(t, id)
		ns += n
	}
	return len(seen) > 0, float64(ns) / 1e3
}

// takenBiasNs is the memory-bound kernel time of the backward nodes of the GEMMs or
// convolutions whose bias in takes (Instance.TakesBias), those not in seen (marked seen):
// their bias gradient's sum, which the fused backward's own pass replaces (the nodes'
// GEMM and convolution kernels are compute).
func takenBiasNs(t *trace.Trace, in *Instance, seen map[int32]bool) int64 {
	var ns int64
	for _, id := range in.TakesBias {
		for _, b := range gemmBackwardNodes(t, id) {
			if seen[b] {
				continue
			}
			seen[b] = true
			for _, id := range bwdOps(t, b) {
				for _, a := range subtreeActIDs(t, id) {
					if classify(t, &t.Acts[a]) == memoryBound {
						ns += t.Acts[a].Dur
					}
				}
			}
		}
	}
	return ns
}

// takenBiasUs is takenBiasNs alone, in µs.
func takenBiasUs(t *trace.Trace, in *Instance) float64 {
	return float64(takenBiasNs(t, in, map[int32]bool{})) / 1e3
}

// gemmBackwardNodes are the backward nodes of the GEMM op id: those of the compute ops it is
// or holds (an aten::linear's addmm), not of the casts nested in it.
func gemmBackwardNodes(t *trace.Trace, id int32) []int32 {
	var out []int32
	op := &t.Ops[id]
	if op.Bwd >= 0 && computeOp(op.Name) {
		out = append(out, op.Bwd)
	}
	for _, c := range op.Children {
		out = append(out, gemmBackwardNodes(t, c)...)
	}
	return out
}

// sourceLine returns the innermost user-code python frame enclosing op id
// ("modeling_gpt2.py(345): forward"), skipping torch's own frames and builtins.
func sourceLine(t *trace.Trace, id int32) string {
	f := t.Ops[id].Py
	for steps := 0; f >= 0 && int(f) < len(t.Python) && steps < 64; steps++ {
		name := t.Python[f].Name
		if strings.Contains(name, ".py(") && !strings.HasPrefix(name, "torch/") &&
			!strings.Contains(name, "/torch/") && !strings.HasPrefix(name, "<") &&
			!strings.HasPrefix(name, "typing.py") && !strings.HasPrefix(name, "dataclasses.py") {
			return name
		}
		f = t.Python[f].Parent
	}
	return ""
}

func groupKey(in *Instance) string {
	b, _ := json.Marshal(struct {
		D [][]int64
		T DType
		P Params
	}{in.Dims, in.DType, in.Params})
	return string(b)
}

func group(all []ranked, keep []bool, busyUs, launchUs float64, perRank bool) []Opportunity {
	byPat := map[string]*Opportunity{}
	groups := map[string]map[string]*ShapeGroup{}
	ranks := map[string]map[int]*RankShare{}
	covered := inAttention(all)
	for i, rk := range all {
		id := rk.in.Pattern
		o := byPat[id]
		if o == nil {
			p := patternByID(id)
			o = &Opportunity{Pattern: id, Fused: p.Fused}
			byPat[id] = o
			groups[id] = map[string]*ShapeGroup{}
			ranks[id] = map[int]*RankShare{}
		}
		o.Instances++
		if keep[i] {
			o.CountedInstances++
			o.CountedSavingUs += valueOf(rk).us
		}
		if rk.bwd {
			o.BackwardInstances++
			o.BackwardGPUTimeUs += rk.bwUs
			o.EstFusedBackwardUs += rk.bwdFusedUs
			o.EstBackwardSavingUs += rk.bwdSavingUs
		}
		o.Kernels += rk.est.kernels
		o.LaunchesSaved += rk.est.kernels - rk.est.fusedKernels
		if !rk.est.timed {
			o.Untimed++
		}
		o.GPUTimeUs += rk.est.gpuUs
		if rk.est.modeled {
			o.EstFusedUs += rk.est.fusedUs
			o.EstSavingUs += rk.est.savingUs
		} else {
			o.EstFusedUs += rk.est.gpuUs
		}
		k := groupKey(rk.in)
		sg := groups[id][k]
		if sg == nil {
			sg = &ShapeGroup{Dims: rk.in.Dims, DType: rk.in.DType, Params: rk.in.Params, Elems: rk.in.Elems,
				Rows: rk.in.Rows, Cols: rk.in.Cols, Bytes: rk.in.Bytes, Valid: validGroup(rk.in)}
			groups[id][k] = sg
		}
		sg.Instances++
		if rk.bwd {
			sg.BackwardGPUTimeUs += rk.bwUs
			sg.EstFusedBackwardUs += rk.bwdFusedUs
			sg.EstBackwardSavingUs += rk.bwdSavingUs
		}
		if covered[i] {
			sg.InAttention++
		}
		sg.GPUTimeUs += rk.est.gpuUs
		if rk.est.modeled {
			sg.EstFusedUs += rk.est.fusedUs
			sg.EstSavingUs += rk.est.savingUs
		} else {
			sg.EstFusedUs += rk.est.gpuUs
		}
		if rk.src != "" && !slices.Contains(sg.Sources, rk.src) && len(sg.Sources) < 8 {
			sg.Sources = append(sg.Sources, rk.src)
		}
		rs := ranks[id][rk.rank]
		if rs == nil {
			rs = &RankShare{Rank: rk.rank}
			ranks[id][rk.rank] = rs
		}
		rs.Instances++
		rs.GPUTimeUs += rk.est.gpuUs
		rs.EstSavingUs += rk.est.savingUs
		rs.EstBackwardSavingUs += rk.bwdSavingUs
	}
	var out []Opportunity
	for id, o := range byPat {
		for _, sg := range groups[id] {
			if busyUs > 0 {
				sg.SavingPct = round2(sg.EstSavingUs / busyUs * 100)
			}
			sg.GPUTimeUs, sg.EstFusedUs, sg.EstSavingUs = round2(sg.GPUTimeUs), round2(sg.EstFusedUs), round2(sg.EstSavingUs)
			sg.BackwardGPUTimeUs, sg.EstFusedBackwardUs, sg.EstBackwardSavingUs = round2(sg.BackwardGPUTimeUs),
				round2(sg.EstFusedBackwardUs), round2(sg.EstBackwardSavingUs)
			o.Shapes = append(o.Shapes, *sg)
		}
		slices.SortFunc(o.Shapes, func(a, b ShapeGroup) int { // by the saving, forward and backward
			if x, y := a.EstSavingUs+a.EstBackwardSavingUs, b.EstSavingUs+b.EstBackwardSavingUs; x != y {
				return cmpF(y, x)
			}
			if a.Instances != b.Instances {
				return b.Instances - a.Instances
			}
			return strings.Compare(fmt.Sprint(a.Dims, a.DType), fmt.Sprint(b.Dims, b.DType))
		})
		if perRank {
			for _, rs := range ranks[id] {
				rs.GPUTimeUs, rs.EstSavingUs, rs.EstBackwardSavingUs = round2(rs.GPUTimeUs), round2(rs.EstSavingUs), round2(rs.EstBackwardSavingUs)
				o.PerRank = append(o.PerRank, *rs)
			}
			slices.SortFunc(o.PerRank, func(a, b RankShare) int { return a.Rank - b.Rank })
		}
		o.EstLaunchSavingUs = round2(float64(o.LaunchesSaved) * launchUs)
		if busyUs > 0 {
			o.SavingPct = round2(o.EstSavingUs / busyUs * 100)
		}
		o.GPUTimeUs, o.EstFusedUs, o.EstSavingUs = round2(o.GPUTimeUs), round2(o.EstFusedUs), round2(o.EstSavingUs)
		o.CountedSavingUs = round2(o.CountedSavingUs)
		o.BackwardGPUTimeUs = round2(o.BackwardGPUTimeUs)
		o.EstFusedBackwardUs, o.EstBackwardSavingUs = round2(o.EstFusedBackwardUs), round2(o.EstBackwardSavingUs)
		o.Advice = advice(o)
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b Opportunity) int { // by the saving, forward and backward
		if x, y := a.EstSavingUs+a.EstBackwardSavingUs, b.EstSavingUs+b.EstBackwardSavingUs; x != y {
			return cmpF(y, x)
		}
		return strings.Compare(a.Pattern, b.Pattern)
	})
	return out
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// patternByID is the registered pattern id, or an empty entry of that id.
func patternByID(id string) *Pattern {
	if p, ok := Lookup(id); ok {
		return p
	}
	return &Pattern{ID: id}
}

// validGroup checks what a kernel generator is promised: positive dims within
// int32 products, a kernel dtype.
func validGroup(in *Instance) bool {
	if !in.DType.Kernel() || in.Elems <= 0 || in.Elems > math.MaxInt32*int64(64) {
		return false
	}
	for _, d := range in.Dims {
		for _, x := range d {
			if x <= 0 {
				return false
			}
		}
	}
	return true
}

// advice turns an opportunity into user-facing suggestions: the pattern's advice, then what
// it adds for this opportunity.
func advice(o *Opportunity) []string {
	p := patternByID(o.Pattern)
	var out []string
	if p.Advice != "" {
		out = append(out, p.Advice)
	}
	if p.advise != nil {
		out = append(out, p.advise(o)...)
	}
	return out
}

// FormatDims writes a group's shapes as "[8,512,768] [3072]".
func FormatDims(dims [][]int64) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		s := make([]string, len(d))
		for j, v := range d {
			s[j] = strconv.FormatInt(v, 10)
		}
		parts[i] = "[" + strings.Join(s, ",") + "]"
	}
	return strings.Join(parts, " ")
}
