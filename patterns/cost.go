package patterns

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fuseadvise/fuseadvise/trace"
)

// CostModel holds every assumption the estimates rest on, in one place. Analyze
// fills its zero fields from DefaultCostModel; BandwidthGBs, ComputeTFLOPs and
// KernelOverheadUs left at zero are calibrated from each trace where it allows,
// and otherwise taken from the device table.
type CostModel struct {
	// BandwidthGBs is the memory bandwidth (bytes read + written per second, in
	// GB/s) a good fused kernel reaches. 0: calibrate from the trace's own large
	// memory-bound kernels, falling back to the device table.
	BandwidthGBs float64
	// ComputeTFLOPs is the dense GEMM rate for flops-bound estimates. 0: from the
	// device table.
	ComputeTFLOPs float64
	// KernelOverheadUs is the fixed GPU time of one kernel however small (ramp-up
	// and tail), added once to every fused estimate. 0: the 5th percentile of the
	// trace's kernel durations, clamped to [MinKernelOverheadUs, MaxKernelOverheadUs].
	KernelOverheadUs float64
	//
	// The constants marked "fitted" are fitted together on the benchmark cases of half of the
	// shared H200 traces and checked on the other half (docs/cost-model.md; the numbers and
	// the one command that reproduces them: docs/benchmarks/cost-fit.md).
	//
	// RowKernelUs is what a row-reduction kernel (norms, softmax, a stats pass) adds to
	// KernelOverheadUs (fitted: 0.4 us; bench/experiments/probe_gap.py measured decode-size
	// fused row kernels at 1.5-1.7 us against 1.1-1.4 us for the pointwise ones).
	RowKernelUs float64
	// GraphGapUs is the time between consecutive kernels replayed back to back in one CUDA
	// graph, which a kernel's duration does not contain (fitted: 0.45 us per launch;
	// probe_gap.py measured 0.24-0.51 us over 13 decode-size cases). Not part of the
	// estimates; the benchmark adds it to the prediction of cases it times back to back.
	GraphGapUs float64
	// AttentionEfficiency is the fraction of ComputeTFLOPs (the dense GEMM rate) a fused
	// attention kernel reaches on the GEMMs' arithmetic (AttentionFlops): its tiles are
	// [BLOCK_M, head dim] x [head dim, BLOCK_N], a head dim of 64 keeps the MMAs short and the
	// online softmax sits between the two GEMMs. 0.16: the one H200 measurement of the
	// template so far, bf16 4x16x1024x64 causal forward at 79.3 us for 8.6 GFLOP
	// (bench/testdata/harness-h200-attention.jsonl; FlexAttention reached 0.19 and SDPA's
	// flash backend 0.31 without a mask). Not fitted: refit after a full attention benchmark.
	AttentionEfficiency float64
	//
	// The backward's constants (BackwardUs), fitted together on the H200 training benchmarks'
	// backward cases of half of the model families and checked on the other half
	// (docs/cost-model.md, "Backward"; docs/benchmarks/cost-fit.md). The backward's kernels pay
	// KernelOverheadUs each (and RowKernelUs for a reduction), a pointwise backward moves its
	// bytes at FusedEfficiency, as the forward does.
	//
	// RowBwdEfficiency is the fraction of BandwidthGBs a fused row backward (the norms': the
	// gradient of the row and the weight's partial sums in one pass; a softmax's) reaches on
	// its bytes (fitted: 0.87 since the row loop of rows of one or two a tile is pipelined; on
	// the H200 add_layernorm's and rmsnorm's one-pass backwards ran at 1.3x their bytes at the
	// copy bandwidth at 8192x4096, 1.4-1.6x before, the pointwise backwards at 1.05x; small
	// calls gain less: BERT's 4096x768 add_layernorm backward is 15% slower than this predicts).
	RowBwdEfficiency float64
	// AttentionBwdEfficiency and AttentionBwdByteEfficiency: the fused attention backward's
	// five products over the kept pairs run at AttentionBwdEfficiency of ComputeTFLOPs, and its
	// bytes (q, k, v, o, their gradients, the row statistics) add at AttentionBwdByteEfficiency
	// of BandwidthGBs: at the tiles it runs, its programs do not hide their row loads and
	// gradient stores under the MMAs, so a short sequence (less arithmetic a byte) runs at a
	// lower share of the GEMM rate (H200: 105 TFLOP/s at 4x16x512x64 causal, 191 at 2x16x2048x64).
	AttentionBwdEfficiency, AttentionBwdByteEfficiency float64
	// GenericBwdEfficiency is the fraction of BandwidthGBs a generic chain's fused backward
	// (one kernel: the chain recomputed from its inputs, the reverse sweep, a broadcast
	// input's gradient summed per program in the same pass) reaches on its bytes
	// (program.BackwardBytes), none of them served by L2: its programs walk their rows once
	// each and finish on a reduction, which keeps fewer bytes in flight than a pointwise
	// kernel. Fitted on the H200 generic backwards of one chain kind and checked on another's
	// (docs/cost-model.md, "Backward").
	GenericBwdEfficiency float64
	// MinKernelOverheadUs and MaxKernelOverheadUs clamp the calibrated overhead;
	// DefaultKernelOverheadUs is used when the trace has no kernel shorter than the
	// maximum (1.1 us: the profiled duration of the decode-size fused pointwise kernels on the
	// H200, bench/experiments/probe_gap.py, and the 5th percentile of the H200 traces' kernels).
	MinKernelOverheadUs, MaxKernelOverheadUs, DefaultKernelOverheadUs float64
	// CalibMinBytes is the smallest kernel (bytes moved) used to calibrate
	// bandwidth: smaller kernels are latency-bound and would underestimate it.
	CalibMinBytes int64
	// CalibMinSamples is how many such kernels calibration needs; with fewer the
	// device table is used.
	CalibMinSamples int
	// CalibPercentile picks the achieved bandwidth among the samples (0..1): a
	// high percentile, since the best eager kernels show what the memory system
	// delivers and a fused kernel is as simple as they are.
	CalibPercentile float64
	// EpilogueOverhead is what a GELU epilogue adds to a GEMM's measured time
	// (linear_gelu), as a fraction of one pass over the GEMM's output at FusedEfficiency of
	// BandwidthGBs (fitted within [0, 1]: 1, a whole pass; the Triton GEMM's epilogue does not
	// overlap its stores with the next tile's loads as cuBLAS's does).
	EpilogueOverhead float64
	// GemmRatio16 and GemmRatio32 are a generated Triton GEMM's time over the GEMM a trace
	// measures (cuBLAS) at the same shape, for fp16/bf16 and for fp32 operands, and
	// fused = GemmRatio * gemm + what fusion adds.
	// Fitted against the traced GEMM times: 1.09 for 16-bit operands (TMA kernels; a fixed
	// term per call, fitted beside it, came out 0 and was dropped); 0.667 for fp32 (the tf32x3
	// kernel of 2026-12-01 against cuBLAS's IEEE fp32 GEMM; docs/cost-model.md).
	GemmRatio16, GemmRatio32 float64
	// FusedEfficiency is the fraction of BandwidthGBs a generated pointwise kernel reaches on
	// its memory traffic (fitted: 0.983; on the H200 the fused kernels that run at the floor
	// at large shapes measured 91-94% of a 1 GiB copy's bandwidth, and the trace's calibrated
	// bandwidth is itself a high percentile of eager kernels, not a copy).
	FusedEfficiency float64
	// RowEfficiency is FusedEfficiency for a row kernel (norms, softmax, a stats pass; fitted:
	// 0.94).
	RowEfficiency float64
	// RowL2Share is the share of the L2 discount (l2Absorbed) a row kernel gets (fitted: 0.883):
	// its dependent passes keep fewer bytes in flight than a pointwise kernel, so L2 helps it
	// less (on the H200 softmax and RMSNorm ran at 0.5-0.8x a copy of their bytes when those fit
	// in L2).
	RowL2Share float64
	// WarmReadShare is the share of a warm call's reads (Shape.Warm: timed back to back, its
	// inputs still in L2 from the call before) that L2 serves, by the rule that absorbs writes
	// (fitted: 0, as 1e-9: with the read-back flush a replay gains nothing measurable).
	WarmReadShare float64
	// L2Bytes is the device's L2 cache (0: from the device table; unknown: no L2 effect).
	// A kernel whose whole footprint (Bytes) fits in L2 finishes before its writes reach
	// memory: at most L2AbsorbAll * L2Bytes all writes are absorbed, from L2AbsorbNone *
	// L2Bytes none, linearly in between; only the reads and the unabsorbed writes are
	// charged. Measured on the H200 (50 MiB L2): an SM copy of 31.5-36 MB ran at 5.7-5.8 TB/s
	// (its writes free), of 41.9 MB at 4.6, of 44 MB at 4.4, of 50 MB and more at 4.1-4.3
	// (copy_us in docs/benchmarks/h200.json): 0.69 and 0.96.
	L2Bytes                   int64
	L2AbsorbAll, L2AbsorbNone float64
	// LaunchUs is the host-side cost of one kernel launch (driver + runtime),
	// reported as est_launch_saving_us for the launches a fusion removes; it is
	// not GPU time and not part of est_saving_us. 4.0 us is do_bench's time for
	// a one-element kernel on an H200 (h200-anchors.md).
	LaunchUs float64
	// Devices is the table used when the trace cannot calibrate: matched by
	// substring of deviceProperties.name, first match wins.
	Devices []DeviceSpec
}

// DeviceSpec is one row of the device table: published peak figures and the
// fraction of them a simple fused kernel reaches.
type DeviceSpec struct {
	Match         string  // substring of the device name
	BandwidthGBs  float64 // peak (or measured, see Efficiency) memory bandwidth
	Efficiency    float64 // fraction of BandwidthGBs reachable by a fused kernel
	ComputeTFLOPs float64 // dense bf16/fp16 tensor-core peak
	ComputeEff    float64 // fraction of ComputeTFLOPs a large GEMM reaches
	L2Bytes       int64   // L2 cache (0: unknown)
}

// DefaultCostModel returns the documented defaults.
func DefaultCostModel() CostModel {
	return CostModel{
		MinKernelOverheadUs:        1.0,
		MaxKernelOverheadUs:        5.0,
		DefaultKernelOverheadUs:    1.1,
		CalibMinBytes:              16 << 20,
		CalibMinSamples:            5,
		CalibPercentile:            0.98,
		EpilogueOverhead:           1,
		GemmRatio16:                1.09,
		GemmRatio32:                0.667,
		L2AbsorbAll:                0.69,
		L2AbsorbNone:               0.96,
		FusedEfficiency:            0.983,
		RowEfficiency:              0.94,
		RowL2Share:                 0.883,
		WarmReadShare:              1e-09,
		LaunchUs:                   4.0,
		RowKernelUs:                0.4,
		GraphGapUs:                 0.45,
		AttentionEfficiency:        0.16,
		RowBwdEfficiency:           0.927,
		GenericBwdEfficiency:       0.767,
		AttentionBwdEfficiency:     0.367,
		AttentionBwdByteEfficiency: 0.319,
		Devices: []DeviceSpec{
			// Measured: device-to-device copy 4.25 TB/s (read+write) and bf16 8192^3
			// GEMM 679 TFLOP/s on one H200 (h200-anchors.md); efficiency 1 since
			// these are already achieved figures.
			{Match: "H200", BandwidthGBs: 4250, Efficiency: 1.0, ComputeTFLOPs: 679, ComputeEff: 1.0, L2Bytes: 50 << 20},
			// Published HBM3 3.35 TB/s, dense bf16 989 TFLOP/s; same achieved
			// fractions as the H200 measurement (4.25/4.8 = 0.89, 679/989 = 0.69).
			{Match: "H100", BandwidthGBs: 3350, Efficiency: 0.89, ComputeTFLOPs: 989, ComputeEff: 0.69, L2Bytes: 50 << 20},
			// A100 80GB: 2.04 TB/s, 312 TFLOP/s; A100 40GB: 1.56 TB/s.
			{Match: "A100-SXM4-80GB", BandwidthGBs: 2039, Efficiency: 0.89, ComputeTFLOPs: 312, ComputeEff: 0.75, L2Bytes: 40 << 20},
			{Match: "A100 80GB", BandwidthGBs: 1935, Efficiency: 0.89, ComputeTFLOPs: 312, ComputeEff: 0.75, L2Bytes: 40 << 20},
			{Match: "A100", BandwidthGBs: 1555, Efficiency: 0.89, ComputeTFLOPs: 312, ComputeEff: 0.75, L2Bytes: 40 << 20},
			// V100: 900 GB/s, 125 TFLOP/s fp16 tensor cores.
			{Match: "V100", BandwidthGBs: 900, Efficiency: 0.85, ComputeTFLOPs: 125, ComputeEff: 0.7, L2Bytes: 6 << 20},
			// MI300X: 5.3 TB/s, 1307 TFLOP/s dense bf16; lower achieved fractions
			// are typical of published microbenchmarks. L2 not set: its 4 MB L2 is
			// small and whether the 256 MB Infinity Cache absorbs writes is not measured.
			{Match: "MI300X", BandwidthGBs: 5300, Efficiency: 0.75, ComputeTFLOPs: 1307, ComputeEff: 0.5},
		},
	}
}

// withDefaults fills m's zero fields from DefaultCostModel (BandwidthGBs,
// ComputeTFLOPs and KernelOverheadUs stay 0: calibrated per trace).
func (m CostModel) withDefaults() CostModel {
	d := DefaultCostModel()
	set := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	set(&m.MinKernelOverheadUs, d.MinKernelOverheadUs)
	set(&m.MaxKernelOverheadUs, d.MaxKernelOverheadUs)
	set(&m.DefaultKernelOverheadUs, d.DefaultKernelOverheadUs)
	set(&m.CalibPercentile, d.CalibPercentile)
	set(&m.EpilogueOverhead, d.EpilogueOverhead)
	set(&m.GemmRatio16, d.GemmRatio16)
	set(&m.GemmRatio32, d.GemmRatio32)
	set(&m.L2AbsorbAll, d.L2AbsorbAll)
	set(&m.L2AbsorbNone, d.L2AbsorbNone)
	set(&m.FusedEfficiency, d.FusedEfficiency)
	set(&m.RowEfficiency, d.RowEfficiency)
	set(&m.RowL2Share, d.RowL2Share)
	set(&m.WarmReadShare, d.WarmReadShare)
	set(&m.LaunchUs, d.LaunchUs)
	set(&m.RowKernelUs, d.RowKernelUs)
	set(&m.GraphGapUs, d.GraphGapUs)
	set(&m.AttentionEfficiency, d.AttentionEfficiency)
	set(&m.RowBwdEfficiency, d.RowBwdEfficiency)
	set(&m.AttentionBwdEfficiency, d.AttentionBwdEfficiency)
	set(&m.AttentionBwdByteEfficiency, d.AttentionBwdByteEfficiency)
	set(&m.GenericBwdEfficiency, d.GenericBwdEfficiency)
	if m.CalibMinBytes == 0 {
		m.CalibMinBytes = d.CalibMinBytes
	}
	if m.CalibMinSamples == 0 {
		m.CalibMinSamples = d.CalibMinSamples
	}
	if m.Devices == nil {
		m.Devices = d.Devices
	}
	return m
}

// Calibration says which figures an analysis used and where they came from.
type Calibration struct {
	BandwidthGBs     float64 `json:"bandwidth_gbs"`
	BandwidthSource  string  `json:"bandwidth_source"` // "trace", "device table", "option", "none"
	BandwidthSamples int     `json:"bandwidth_samples"`
	ComputeTFLOPs    float64 `json:"compute_tflops"`
	KernelOverheadUs float64 `json:"kernel_overhead_us"`
	OverheadSource   string  `json:"kernel_overhead_source"`
}

func (m *CostModel) device(name string) (DeviceSpec, bool) {
	for _, d := range m.Devices {
		if strings.Contains(name, d.Match) {
			return d, true
		}
	}
	return DeviceSpec{}, false
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(p * float64(len(v)-1))
	return v[min(max(i, 0), len(v)-1)]
}

// subtreeActs sums the durations (ns) of the GPU activities launched by op id and
// its descendants, and counts the kernels.
func subtreeActs(t *trace.Trace, id int32) (ns int64, kernels int) {
	op := &t.Ops[id]
	for _, a := range op.Acts {
		ns += t.Acts[a].Dur
		if t.Acts[a].Kind == trace.ActKernel {
			kernels++
		}
	}
	for _, c := range op.Children {
		n, k := subtreeActs(t, c)
		ns += n
		kernels += k
	}
	return ns, kernels
}

// gemmActs is subtreeActs of a GEMM op without the casts, copies and bias adds nested in it
// (autocast's fp32 -> bf16 copies of the input, weight and bias; the contiguous copy of a
// strided input and the separate add_ of the bias that aten::linear runs on 3-D
// non-contiguous inputs, as nn.MultiheadAttention's in_proj does): the GEMM kernels a fusion
// keeps. A fused kernel takes the activation in the GEMM's type, the weights cast once and the
// bias in its epilogue.
func gemmActs(t *trace.Trace, id int32) (ns int64, kernels int) {
	op := &t.Ops[id]
	for _, a := range op.Acts {
		ns += t.Acts[a].Dur
		if t.Acts[a].Kind == trace.ActKernel {
			kernels++
		}
	}
	for _, c := range op.Children {
		switch baseName(t.Ops[c].Name) {
		case "to", "_to_copy", "copy_", "contiguous", "clone", "add", "add_":
			continue // casts, the copy of a strided input, a bias added apart (mm + add_)
		}
		n, k := gemmActs(t, c)
		ns += n
		kernels += k
	}
	return ns, kernels
}

// memBoundOps are ops whose single kernel is a pure streaming kernel: the
// calibration samples. Not the transcendental ones (gelu, tanh, exp, silu...): ATen's erf
// GELU ran at 1.5 TB/s on the H200 traces, limited by its arithmetic, not by memory.
var memBoundOps = map[string]bool{
	"add": true, "sub": true, "mul": true, "div": true, "relu": true, "neg": true,
	"to": true, "_to_copy": true, "copy_": true, "clone": true, "contiguous": true,
	"add_": true, "mul_": true, "where": true, "masked_fill": true,
}

// streamingKernel reports whether the one kernel op id's subtree launched is a vectorized
// streaming kernel: not ATen's generic elementwise_kernel / unrolled_elementwise_kernel, the
// paths for mixed dtypes and strided inputs, which run far below the memory bandwidth (1.5-2
// TB/s on the H200 traces, where the vectorized kernels of the same ops reach 4-5 TB/s) and
// would make calibration say the memory is slow when only those kernels are.
func streamingKernel(t *trace.Trace, id int32) bool {
	op := &t.Ops[id]
	for _, a := range op.Acts {
		if act := &t.Acts[a]; act.Kind == trace.ActKernel {
			n := act.Name
			return !strings.Contains(n, "unrolled_elementwise_kernel") && !strings.Contains(n, "native::elementwise_kernel<")
		}
	}
	for _, c := range op.Children {
		if _, k := subtreeActs(t, c); k > 0 {
			return streamingKernel(t, c)
		}
	}
	return true
}

// calibrate fills the zero fields of m from trace g (bandwidth, overhead) and the
// device table.
func calibrate(m CostModel, g *graph, device string) (CostModel, Calibration) {
	var c Calibration
	spec, hasSpec := m.device(device)
	t := g.t
	switch {
	case m.BandwidthGBs > 0:
		c.BandwidthSource = "option"
	default:
		// samples must move more than L2 holds: a kernel whose data fits in L2 runs faster
		// than memory delivers, and streamUs grants that discount on its own
		minBytes := m.CalibMinBytes
		if l2 := m.L2Bytes; l2 == 0 && hasSpec {
			minBytes = max(minBytes, int64(m.L2AbsorbNone*float64(spec.L2Bytes)))
		} else if l2 > 0 {
			minBytes = max(minBytes, int64(m.L2AbsorbNone*float64(l2)))
		}
		var samples []float64
		for n := range g.nodes {
			if g.pass[n] && !isName(g.name[n], "to", "_to_copy", "clone", "contiguous", "copy_") {
				continue
			}
			if !memBoundOps[g.name[n]] {
				continue
			}
			ns, k := subtreeActs(t, g.nodes[n])
			if k != 1 || ns <= 0 || !streamingKernel(t, g.nodes[n]) {
				continue
			}
			var bytes int64
			for _, in := range g.ins(int32(n)) {
				if isTensor(in) {
					bytes += numel(in.Dims) * parseDType(in.Type).Size()
				}
			}
			v, ok := g.val0(int32(n))
			if !ok {
				continue
			}
			bytes += numel(v.dims) * v.dtype.Size()
			if bytes < minBytes {
				continue
			}
			samples = append(samples, float64(bytes)/float64(ns)) // bytes/ns == GB/s
		}
		c.BandwidthSamples = len(samples)
		if len(samples) >= m.CalibMinSamples {
			m.BandwidthGBs = percentile(samples, m.CalibPercentile)
			c.BandwidthSource = "trace"
			if hasSpec && m.BandwidthGBs > spec.BandwidthGBs*spec.Efficiency {
				m.BandwidthGBs = spec.BandwidthGBs * spec.Efficiency // never beyond what the device table says is reachable
			}
		} else if hasSpec {
			m.BandwidthGBs = spec.BandwidthGBs * spec.Efficiency
			c.BandwidthSource = "device table"
		} else {
			c.BandwidthSource = "none"
		}
	}
	if m.L2Bytes == 0 && hasSpec {
		m.L2Bytes = spec.L2Bytes
	}

	if m.ComputeTFLOPs == 0 && hasSpec {
		m.ComputeTFLOPs = spec.ComputeTFLOPs * spec.ComputeEff
	}
	c.OverheadSource = "option"
	if m.KernelOverheadUs == 0 {
		var d []float64
		for i := range t.Acts {
			if t.Acts[i].Kind == trace.ActKernel && t.Acts[i].Dur > 0 {
				d = append(d, float64(t.Acts[i].Dur)/1e3)
			}
		}
		p5 := percentile(d, 0.05)
		if len(d) > 0 && p5 <= m.MaxKernelOverheadUs {
			m.KernelOverheadUs = max(p5, m.MinKernelOverheadUs)
			c.OverheadSource = "trace"
		} else { // no small kernels: the trace says nothing about the fixed cost
			m.KernelOverheadUs = m.DefaultKernelOverheadUs
			c.OverheadSource = "default"
		}
	}
	c.BandwidthGBs = m.BandwidthGBs
	c.ComputeTFLOPs = m.ComputeTFLOPs
	c.KernelOverheadUs = m.KernelOverheadUs
	return m, c
}

// estimate is the cost of one instance.
type estimate struct {
	gpuUs, fusedUs, savingUs float64
	kernels                  int  // kernels the instance's ops launched
	fusedKernels             int  // kernels the fused form launches (the GEMMs kept, plus one)
	timed                    bool // its ops launched GPU work in the trace
	modeled                  bool // the model could estimate it (bandwidth known)
}

// estimateInstance measures an instance's kernels and models the fused kernel with the
// same rules as FusedUs (CostModel.fused), on the Shape the instance describes (shapeOf).
func estimateInstance(m *CostModel, t *trace.Trace, in *Instance) estimate {
	var e estimate
	var ns int64
	for _, id := range in.Ops {
		n, k := subtreeActs(t, id)
		ns += n
		e.kernels += k
	}
	e.gpuUs = float64(ns) / 1e3
	e.timed = ns > 0
	e.fusedKernels = 1
	for _, id := range in.GEMMs {
		_, k := gemmActs(t, id)
		e.fusedKernels += k
	}
	p := patternByID(in.Pattern)
	if p.GEMM == GEMMEpilogue && len(in.GEMMs) > 0 {
		e.fusedKernels-- // the epilogue lives in the GEMM
	}
	e.fusedKernels = min(e.fusedKernels, e.kernels)
	if !e.timed || m.BandwidthGBs <= 0 {
		return e
	}
	e.modeled = true
	e.fusedUs = m.fused(p, shapeOf(t, in))
	e.savingUs = max(e.gpuUs-e.fusedUs, 0)
	return e
}

// shapeOf is what the cost model reads of an instance: its bytes, and for a GEMM pattern
// the GEMMs' traced time without the casts and bias adds nested in them (gemmActs) and the
// GEMM's element size (the output type under autocast: bf16 after an fp32 LayerNorm).
func shapeOf(t *trace.Trace, in *Instance) Shape {
	s := Shape{Pattern: in.Pattern, Bytes: in.Bytes, WriteBytes: in.WriteBytes, Flops: in.Flops}
	if len(in.GEMMs) == 0 {
		return s
	}
	var ns int64
	for _, id := range in.GEMMs {
		n, _ := gemmActs(t, id)
		ns += n
	}
	dt := in.DType
	if in.Params.OutDType != DTypeUnknown && in.Params.OutDType != "" {
		dt = in.Params.OutDType
	}
	s.GemmUs, s.GemmElemSize, s.ExtraBytes = float64(ns)/1e3, dt.Size(), in.Bytes
	return s
}

// Shape is one fused call described by what the cost model needs, for estimates made
// without a trace (the benchmark's cases): the chain's fewest bytes, and for GEMM patterns
// the GEMM's measured time and the bytes fusion adds to it.
type Shape struct {
	Pattern string
	Bytes   int64 // fewest bytes the fused memory-bound kernel moves (memory-bound patterns)
	// WriteBytes is the part of Bytes the kernel writes (its outputs), which L2 may absorb.
	WriteBytes int64
	GemmUs     float64 // GEMM patterns: the GEMM's measured time, as a trace would show it
	// ExtraBytes, for GEMM patterns: layernorm_linear's stats pass reads x and writes
	// mean/rstd; linear_gelu's epilogue touches the GEMM output once.
	ExtraBytes int64
	// GemmElemSize is the GEMM operands' element size in bytes (4: fp32; 2: fp16/bf16).
	GemmElemSize int64
	// Flops is the arithmetic a memory-bound chain cannot avoid (0: none to speak of).
	Flops int64
	// Warm says the call runs back to back with itself (a benchmark's do_bench_cudagraph
	// timing): what it reads is still in L2 from the call before, as far as it fits
	// (CostModel.WarmReadShare). False for a chain in a model.
	Warm bool
}

// fusedGemmUs is a cuBLAS GEMM time as a generated Triton GEMM of operands of elemSize bytes
// runs it.
func (m CostModel) fusedGemmUs(gemmUs float64, elemSize int64) float64 {
	r := m.GemmRatio16
	if elemSize >= 4 {
		r = m.GemmRatio32
	}
	return r * gemmUs
}

// streamUs is the time a pointwise kernel takes to move bytes (writes of them written) at bw
// GB/s times FusedEfficiency: the reads and the writes L2 does not absorb.
func (m CostModel) streamUs(bytes, writes int64, warm bool, bw float64) float64 {
	return (float64(bytes) - m.l2Absorbed(bytes, writes, warm)) / (m.FusedEfficiency * bw * 1e3) // GB/s = 1e3 bytes/us
}

// l2Absorbed is the part of a kernel's traffic that L2 serves: its writes when its whole
// footprint (bytes) is at most L2AbsorbAll of L2, none from L2AbsorbNone, linearly in between;
// when warm (timed back to back, its inputs still in L2 from the call before), WarmReadShare of
// its reads too, by the same rule. No L2 known: none.
func (m CostModel) l2Absorbed(bytes, writes int64, warm bool) float64 {
	l2 := float64(m.L2Bytes)
	if l2 <= 0 || m.L2AbsorbNone <= m.L2AbsorbAll {
		return 0
	}
	f := min(max((m.L2AbsorbNone*l2-float64(bytes))/((m.L2AbsorbNone-m.L2AbsorbAll)*l2), 0), 1)
	served := float64(writes)
	if warm {
		served += m.WarmReadShare * float64(bytes-writes)
	}
	return served * f
}

// FusedUs estimates one fused call on device (a deviceProperties name, e.g. "NVIDIA H200")
// with the same rules as an analysis (CostModel.fused), the bandwidth m.BandwidthGBs, else the
// device table's, and the kernel overhead m.KernelOverheadUs, else DefaultKernelOverheadUs;
// ok is false when no bandwidth is known or a GEMM pattern has no GEMM time.
func (m CostModel) FusedUs(device string, s Shape) (us float64, ok bool) {
	m, ok = m.onDevice(device)
	if !ok {
		return 0, false
	}
	p := patternByID(s.Pattern)
	if p.Kind == KindGEMM && s.GemmUs <= 0 {
		return 0, false
	}
	return m.fused(p, s), true
}

// onDevice is m with its defaults and, where m leaves them at zero, device's figures from the
// table (bandwidth, GEMM rate, L2) and DefaultKernelOverheadUs; ok is false when no bandwidth
// is known.
func (m CostModel) onDevice(device string) (CostModel, bool) {
	m = m.withDefaults()
	d, found := m.device(device)
	if m.BandwidthGBs <= 0 {
		if !found {
			return m, false
		}
		m.BandwidthGBs = d.BandwidthGBs * d.Efficiency
	}
	if m.KernelOverheadUs <= 0 {
		m.KernelOverheadUs = m.DefaultKernelOverheadUs
	}
	if found && m.L2Bytes == 0 {
		m.L2Bytes = d.L2Bytes
	}
	if m.ComputeTFLOPs == 0 && found {
		m.ComputeTFLOPs = d.ComputeTFLOPs * d.ComputeEff
	}
	return m, true
}

// BackwardShape is one fused backward call (the backward of one chain in a training step) as
// the cost model reads it.
type BackwardShape struct {
	Pattern string
	// Bytes is the fewest bytes the backward moves (the adapters' bwd_nbytes: the output
	// gradients and what the derivatives read, the gradients written), WriteBytes the part it
	// writes (the gradients), which L2 may absorb.
	Bytes, WriteBytes int64
	// PartialBytes is the fp32 partial sums of a weight's or bias' gradient ([groups, K, N]:
	// each program adds up its rows), which the main pass writes and a second launch adds up
	// (_sum_parts). 0: no such gradient.
	PartialBytes int64
	// Flops, attention: the backward's GEMM arithmetic (five products over the kept pairs, at
	// the head dim its tiles pad to).
	Flops int64
	// SumBytes: a bias gradient added up by ATen (a row sum) from the gradient the main pass
	// wrote, read again (bias_gelu, layernorm_linear). 0: none.
	SumBytes int64
	// GemmUs, GEMM patterns: the forward's GEMM as cuBLAS runs it; the backward runs two of
	// its size (dX, dW) on cuBLAS, and one pass of PassBytes: with an epilogue (linear_gelu)
	// before them, the GELU's derivative (read the output gradient and the pre-activation,
	// write the GEMMs' gradient); after a LayerNorm (layernorm_linear) between them, the
	// LayerNorm's backward (read x and dxn, write dx and the normalized input dW reads).
	GemmUs    float64
	PassBytes int64
	// FoldBytes, a GEMM after a LayerNorm: the training step's refold of the weights (W
	// read, W' written, one row kernel), which its forward runs after every optimizer update;
	// counted with the backward so that a step's forward + backward holds it. 0: none.
	FoldBytes int64
	// Warm: timed back to back (Shape.Warm).
	Warm bool
}

// BackwardUs estimates one fused backward call on device (its kernels' durations, as a trace
// records them) and the kernels it launches, by the pattern's kind:
//
//   - pointwise: one pass over Bytes (plus the partial sums it writes) less what L2 serves, at
//     FusedEfficiency, as the forward; row (norms, softmax): at RowBwdEfficiency, less
//     RowL2Share of it, plus RowKernelUs;
//   - a weight's or bias' gradient: a second launch reading its partial sums (PartialBytes)
//     or the whole gradient (SumBytes), a reduction (RowKernelUs) at RowBwdEfficiency;
//   - attention: three kernels (the row statistics, dK and dV, dQ), the flops at
//     AttentionBwdEfficiency of ComputeTFLOPs and the bytes at AttentionBwdByteEfficiency of
//     the bandwidth, added;
//   - GEMM with an epilogue: two cuBLAS GEMMs of the forward's (2 x GemmUs), the derivative's
//     pass as a pointwise one (writing the bias' partial sums), their sum as above;
//   - GEMM after a LayerNorm: two cuBLAS GEMMs of the forward's, the LayerNorm's backward
//     pass (PassBytes) as a row backward, its partial sums and the bias' row sum as above,
//     and the step's refold of the weights (FoldBytes) as a row kernel.
//
// Every kernel pays KernelOverheadUs; a benchmark timing calls back to back also pays
// GraphGapUs a launch (bench.Predict adds it). ok is false when no bandwidth is known or the
// pattern has no backward model.
func (m CostModel) BackwardUs(device string, s BackwardShape) (us float64, launches int, ok bool) {
	m, ok = m.onDevice(device)
	if !ok {
		return 0, 0, false
	}
	p := patternByID(s.Pattern)
	bw := m.BandwidthGBs * 1e3 // bytes per us
	// reduce is a reduction pass over bytes: the partial sums' or a bias' row sum
	reduce := func(bytes int64) float64 {
		return m.KernelOverheadUs + m.RowKernelUs + float64(bytes)/(m.RowBwdEfficiency*bw)
	}
	switch {
	case p.GEMM == GEMMEpilogue:
		if s.GemmUs <= 0 {
			return 0, 0, false
		}
		us = 2*s.GemmUs + m.KernelOverheadUs + m.streamUs(s.PassBytes+s.PartialBytes, s.PassBytes/3+s.PartialBytes, s.Warm, m.BandwidthGBs)
		launches = 3
		for _, b := range []int64{s.PartialBytes, s.SumBytes} {
			if b > 0 {
				us += reduce(b)
				launches++
			}
		}
		return us, launches, true
	case p.GEMM == GEMMStats:
		if s.GemmUs <= 0 {
			return 0, 0, false
		}
		charged := float64(s.PassBytes) - m.RowL2Share*m.l2Absorbed(s.PassBytes, s.PassBytes/2, s.Warm)
		us = 2*s.GemmUs + m.KernelOverheadUs + m.RowKernelUs + charged/(m.RowBwdEfficiency*bw)
		launches = 3
		if s.FoldBytes > 0 {
			us += m.rowUs(s.FoldBytes, s.FoldBytes/2, s.Warm)
			launches++
		}
		for _, b := range []int64{s.PartialBytes, s.SumBytes} {
			if b > 0 {
				us += reduce(b)
				launches++
			}
		}
		return us, launches, true
	case p.Kind == KindGEMM:
		return 0, 0, false
	case s.Pattern == GenericPatternID:
		// one kernel over the bytes, its per-program sums in the same pass; with a GEMM head,
		// cuBLAS's two gradient GEMMs after it
		us = m.KernelOverheadUs + m.RowKernelUs + float64(s.Bytes)/(m.GenericBwdEfficiency*bw)
		launches = 1
		if s.GemmUs > 0 {
			us += 2*s.GemmUs + 2*m.KernelOverheadUs
			launches += 2
		}
		return us, launches, true
	case p.Kind == KindAttention:
		if m.ComputeTFLOPs <= 0 {
			return 0, 0, false
		}
		us = 3*m.KernelOverheadUs + float64(s.Flops)/(m.AttentionBwdEfficiency*m.ComputeTFLOPs*1e6) +
			float64(s.Bytes)/(m.AttentionBwdByteEfficiency*bw)
		return us, 3, true
	}
	bytes, writes := s.Bytes+s.PartialBytes, s.WriteBytes+s.PartialBytes
	if p.RowKernel() {
		charged := float64(bytes) - m.RowL2Share*m.l2Absorbed(bytes, writes, s.Warm)
		us = m.KernelOverheadUs + m.RowKernelUs + charged/(m.RowBwdEfficiency*bw)
	} else {
		us = m.KernelOverheadUs + m.streamUs(bytes, writes, s.Warm, m.BandwidthGBs)
	}
	launches = 1
	if s.PartialBytes > 0 {
		us += reduce(s.PartialBytes)
		launches++
	}
	if s.SumBytes > 0 {
		us += reduce(s.SumBytes)
		launches++
	}
	return us, launches, true
}

// fused is one fused call's GPU time (a kernel duration, as a trace records it) for a
// calibrated m (BandwidthGBs and KernelOverheadUs set), by the pattern's kind:
//
//   - pointwise: KernelOverheadUs per launch, plus the bytes less what L2 serves
//     (l2Absorbed) at FusedEfficiency of the bandwidth, or the flops at ComputeTFLOPs if
//     slower;
//   - row (norms, softmax): KernelOverheadUs + RowKernelUs per launch, plus the bytes less
//     RowL2Share of what L2 serves, at RowEfficiency of the bandwidth (rowUs);
//   - attention: as pointwise, its GEMMs' flops at AttentionEfficiency of ComputeTFLOPs;
//   - GEMM: the traced GEMM as a generated Triton GEMM runs it (GemmRatio16/32), plus for a
//     stats pass (layernorm_linear) a row kernel over ExtraBytes, for an epilogue
//     (linear_gelu) EpilogueOverhead of one pass over its output, or, where faster, the
//     kernel's library path: the traced GEMM itself and a pointwise pass over its output
//     (linear_gelu) or input (layernorm_linear: the normalized input, after the stats).
//
// A benchmark timing calls back to back in one CUDA graph also pays GraphGapUs per launch
// (bench.Predict adds it); Shape.Warm gives such a call its inputs warm in L2.
func (m CostModel) fused(p *Pattern, s Shape) float64 {
	switch p.GEMM {
	case GEMMStats:
		// the faster of the Triton GEMM with the statistics applied in it and the kernel's
		// library path: the statistics, the normalized input written (about the stats pass's
		// bytes, read and written) and the traced GEMM as cuBLAS ran it
		stats := m.rowUs(s.ExtraBytes, 0, false)
		triton := m.fusedGemmUs(s.GemmUs, s.GemmElemSize) + stats
		library := s.GemmUs + stats + float64(2*s.ExtraBytes)/(m.FusedEfficiency*m.BandwidthGBs*1e3) + m.KernelOverheadUs
		return min(triton, library)
	case GEMMEpilogue:
		// the faster of the Triton GEMM with the epilogue and the kernel's library path (the
		// traced GEMM as cuBLAS ran it, then the epilogue as a pointwise pass reading and
		// writing the output): the kernel times both in each bucket and keeps the faster
		triton := m.epilogueGemmUs(s)
		// (its read follows the GEMM's write of the same bytes, yet measured at 14x14x384->1536
		// nothing of it came from L2: no l2Absorbed)
		library := s.GemmUs + float64(2*s.ExtraBytes)/(m.FusedEfficiency*m.BandwidthGBs*1e3) + m.KernelOverheadUs
		return min(triton, library)
	}
	if p.RowKernel() {
		return m.rowUs(s.Bytes, s.WriteBytes, s.Warm)
	}
	t := m.streamUs(s.Bytes, s.WriteBytes, s.Warm, m.BandwidthGBs)
	if rate := m.ComputeTFLOPs; rate > 0 {
		if p.Kind == KindAttention {
			rate *= m.AttentionEfficiency
		}
		t = max(t, float64(s.Flops)/(rate*1e6))
	}
	return t + m.KernelOverheadUs
}

// epilogueGemmUs is a Triton GEMM with a pointwise epilogue (Shape.ExtraBytes its own
// traffic) as a calibrated m times it: the GEMM at GemmRatio16/32 plus EpilogueOverhead of
// one pass over those bytes.
func (m CostModel) epilogueGemmUs(s Shape) float64 {
	return m.fusedGemmUs(s.GemmUs, s.GemmElemSize) + m.EpilogueOverhead*float64(s.ExtraBytes)/(m.FusedEfficiency*m.BandwidthGBs*1e3)
}

// PointwisePassUs is one pointwise kernel over bytes (writes of them written) on device, cold,
// with its fixed cost, and false when no bandwidth is known.
func (m CostModel) PointwisePassUs(device string, bytes, writes int64) (float64, bool) {
	m, ok := m.onDevice(device)
	if !ok {
		return 0, false
	}
	return m.streamUs(bytes, writes, false, m.BandwidthGBs) + m.KernelOverheadUs, true
}

// RowPassUs is one row kernel over bytes (half of them written) on device, cold (rowUs), and
// false when no bandwidth is known.
func (m CostModel) RowPassUs(device string, bytes int64) (float64, bool) {
	m, ok := m.onDevice(device)
	if !ok {
		return 0, false
	}
	return m.rowUs(bytes, bytes/2, false), true
}

// rowUs is a row kernel's time: its fixed cost (KernelOverheadUs + RowKernelUs), plus its
// bytes at RowEfficiency of the bandwidth, less RowL2Share of the writes L2 absorbs (l2Absorbed:
// a row kernel's dependent passes keep fewer bytes in flight than a pointwise kernel's, so L2
// helps it less).
func (m CostModel) rowUs(bytes, writes int64, warm bool) float64 {
	charged := float64(bytes) - m.RowL2Share*m.l2Absorbed(bytes, writes, warm)
	return charged/(m.RowEfficiency*m.BandwidthGBs*1e3) + m.KernelOverheadUs + m.RowKernelUs
}

// CostCase is one shape group of a trace as the cost model reads it: the group (its key,
// instances and eager GPU time, as Analyze reports it), the per-instance Shape its estimate
// rests on (the GEMM time averaged over the instances) and the trace's calibration. For
// fitting and checking the model's constants against measured fused kernels
// (bench's cost fit); forward-only patterns keep their fused estimate here even in training.
type CostCase struct {
	Group       ShapeGroup
	Shape       Shape
	Calibration Calibration
}

// CostCases finds the instances Analyze finds in t (opts.Cost, opts.Pattern and opts.ET as
// there) and returns one CostCase per pattern and shape group, in a stable order.
func CostCases(t *trace.Trace, opts Options) ([]CostCase, error) {
	g := newGraph(t)
	if et := opts.ET[t]; et != nil {
		if err := g.fromET(et); err != nil {
			return nil, fmt.Errorf("patterns: %s: %w", t.Path, err)
		}
	} else {
		g.infer()
	}
	m, cal := calibrate(opts.Cost.withDefaults(), g, summarize(t).Device)
	byKey := map[string]*CostCase{}
	var keys []string
	for _, in := range detect(g, opts.Pattern) {
		k := in.Pattern + groupKey(in)
		c := byKey[k]
		if c == nil {
			c = &CostCase{Group: ShapeGroup{Dims: in.Dims, DType: in.DType, Params: in.Params, Elems: in.Elems,
				Rows: in.Rows, Cols: in.Cols, Bytes: in.Bytes, Valid: validGroup(in)}, Calibration: cal}
			c.Shape = shapeOf(t, in)
			c.Shape.GemmUs = 0
			byKey[k] = c
			keys = append(keys, k)
		}
		e := estimateInstance(&m, t, in)
		c.Group.Instances++
		c.Group.GPUTimeUs += e.gpuUs
		c.Group.EstFusedUs += e.fusedUs
		c.Shape.GemmUs += shapeOf(t, in).GemmUs
	}
	slices.Sort(keys)
	out := make([]CostCase, 0, len(keys))
	for _, k := range keys {
		c := byKey[k]
		c.Shape.GemmUs /= float64(c.Group.Instances)
		out = append(out, *c)
	}
	return out, nil
}

// Calibrated is m with what a trace's calibration c found (bandwidth, kernel overhead), for
// estimating a CostCase with other constants (FusedUs on its Shape).
func (m CostModel) Calibrated(c Calibration) CostModel {
	m.BandwidthGBs, m.KernelOverheadUs = c.BandwidthGBs, c.KernelOverheadUs
	return m
}
