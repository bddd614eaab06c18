package patterns

import (
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
	// RowKernelUs is what a row-reduction kernel (norms, softmax, a stats pass) adds to
	// KernelOverheadUs: at decode sizes on the H200 the fused row kernels took 1.5-1.7 us
	// against 1.1-1.4 us for the pointwise ones (kernel durations from the profiler,
	// bench/experiments/probe_gap.py): 0.5 us.
	RowKernelUs float64
	// GraphGapUs is the time between consecutive kernels replayed back to back in one CUDA
	// graph, which a kernel's duration does not contain: 0.45 us per kernel on the H200
	// (probe_gap.py: per-call time of do_bench_cudagraph minus the profiled kernel
	// durations, 0.24-0.51 us over 13 decode-size cases). Not part of the estimates; the
	// benchmark adds it to the prediction of cases it times back to back.
	GraphGapUs float64
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
	// (linear_gelu), as a fraction of one pass over the GEMM's output at
	// BandwidthGBs: the output is written by the GEMM anyway, only the GELU
	// arithmetic on it is new (0.25: about a quarter of streaming it once).
	EpilogueOverhead float64
	// GemmRatio16 and GemmRatio32 are a generated Triton GEMM's time over the GEMM a trace
	// measures (cuBLAS) at the same shape, for fp16/bf16 and for fp32 operands, and
	// GemmFixedUs what a fused GEMM call adds on top (launch ramp, tile tail), at most
	// GemmFixedFrac of the GEMM's own time (a small GEMM has a small tail):
	// fused = GemmRatio * gemm + min(GemmFixedUs, GemmFixedFrac * gemm) + what fusion adds.
	// Fitted on the H200 (docs/benchmarks/h200.json: the 32 fp16/bf16
	// linear_gelu/layernorm_linear cases against their measured cuBLAS GEMM alone, 29 within
	// +-20%, median |error| 9.7%): 1.04, 8.5 us and 0.5 for 16-bit operands (TMA kernels);
	// 2.1 for fp32 (FMA-based IEEE fp32 against cuBLAS SGEMM).
	GemmRatio16, GemmRatio32, GemmFixedUs, GemmFixedFrac float64
	// FusedEfficiency is the fraction of BandwidthGBs a generated fused kernel reaches on
	// its memory traffic. 0.92: on the H200 the fused kernels that run at the floor at
	// large shapes measured 91-94% of the device-to-device copy bandwidth
	// (docs/benchmarks/h200.json: tanh bias+GELU and gelu_pyops bf16 91%, swiglu 94%,
	// the large additive-mask softmax cases 91-92%, fp32 bias+GELU 93%).
	FusedEfficiency float64
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
		MinKernelOverheadUs:     1.0,
		MaxKernelOverheadUs:     5.0,
		DefaultKernelOverheadUs: 1.1,
		CalibMinBytes:           16 << 20,
		CalibMinSamples:         5,
		CalibPercentile:         0.98,
		EpilogueOverhead:        0.25,
		GemmRatio16:             1.04,
		GemmRatio32:             2.1,
		GemmFixedUs:             8.5,
		GemmFixedFrac:           0.5,
		L2AbsorbAll:             0.69,
		L2AbsorbNone:            0.96,
		FusedEfficiency:         0.92,
		LaunchUs:                4.0,
		RowKernelUs:             0.5,
		GraphGapUs:              0.45,
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
	set(&m.GemmFixedUs, d.GemmFixedUs)
	set(&m.GemmFixedFrac, d.GemmFixedFrac)
	set(&m.L2AbsorbAll, d.L2AbsorbAll)
	set(&m.L2AbsorbNone, d.L2AbsorbNone)
	set(&m.FusedEfficiency, d.FusedEfficiency)
	set(&m.LaunchUs, d.LaunchUs)
	set(&m.RowKernelUs, d.RowKernelUs)
	set(&m.GraphGapUs, d.GraphGapUs)
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

// estimateInstance measures an instance's kernels and models the fused kernel.
//
//   - Memory-bound chains: fused = (Bytes less the writes L2 absorbs) / bandwidth + one
//     kernel's overhead.
//   - Chains with GEMMs keep the GEMMs' measured time (their kernels without the
//     casts autocast nests in them, gemmActs), as a generated Triton GEMM
//     runs it (GemmRatio, GemmFixedUs), and add only what fusion cannot remove:
//     layernorm_linear a stats pass (its Bytes) as a separate kernel; linear_gelu
//     the epilogue's arithmetic, EpilogueOverhead of one pass over the GEMM output
//     (its Bytes).
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
	memUs := float64(in.Bytes) / (m.FusedEfficiency * m.BandwidthGBs * 1e3) // GB/s = 1e3 bytes/us
	if len(in.GEMMs) == 0 {
		memUs = m.streamUs(p, in.Bytes, in.WriteBytes, m.BandwidthGBs)
		flopUs := 0.0
		if m.ComputeTFLOPs > 0 {
			flopUs = float64(in.Flops) / (m.ComputeTFLOPs * 1e6)
		}
		e.fusedUs = max(memUs, flopUs) + m.kernelUs(p)
	} else {
		var gemmNs int64
		for _, id := range in.GEMMs {
			n, _ := gemmActs(t, id)
			gemmNs += n
		}
		dt := in.DType
		if in.Params.OutDType != DTypeUnknown && in.Params.OutDType != "" {
			dt = in.Params.OutDType // the GEMM's type (autocast: bf16 after an fp32 LayerNorm)
		}
		gemmUs := m.fusedGemmUs(float64(gemmNs)/1e3, dt.Size())
		switch p.GEMM {
		case GEMMEpilogue:
			e.fusedUs = gemmUs + m.EpilogueOverhead*memUs // Bytes: the GEMM output
		default:
			e.fusedUs = gemmUs + memUs + m.kernelUs(p) // the stats pass
		}
	}
	e.savingUs = max(e.gpuUs-e.fusedUs, 0)
	return e
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
}

// fusedGemmUs is a cuBLAS GEMM time as a generated Triton GEMM of operands of elemSize bytes
// runs it.
func (m CostModel) fusedGemmUs(gemmUs float64, elemSize int64) float64 {
	r := m.GemmRatio16
	if elemSize >= 4 {
		r = m.GemmRatio32
	}
	return r*gemmUs + min(m.GemmFixedUs, m.GemmFixedFrac*gemmUs)
}

// kernelUs is a fused kernel's fixed time: KernelOverheadUs, plus RowKernelUs for a row
// reduction (Pattern.RowKernel).
func (m CostModel) kernelUs(p *Pattern) float64 {
	if p.RowKernel() {
		return m.KernelOverheadUs + m.RowKernelUs
	}
	return m.KernelOverheadUs
}

// streamUs is the time a fused kernel of pattern takes to move bytes (writes of them
// written) at bw GB/s times FusedEfficiency: for a pointwise kernel the reads and the writes
// L2 does not absorb; a row kernel is charged all its bytes (its dependent passes keep too
// few bytes in flight to run at L2 speed: on the H200 softmax and RMSNorm ran at 0.5-0.8x a
// copy of their bytes when those fit in L2, at 0.9-1.0x beyond).
func (m CostModel) streamUs(p *Pattern, bytes, writes int64, bw float64) float64 {
	charged := float64(bytes)
	if l2 := float64(m.L2Bytes); l2 > 0 && m.L2AbsorbNone > m.L2AbsorbAll && !p.RowKernel() {
		f := (m.L2AbsorbNone*l2 - float64(bytes)) / ((m.L2AbsorbNone - m.L2AbsorbAll) * l2)
		charged -= float64(writes) * min(max(f, 0), 1)
	}
	return charged / (m.FusedEfficiency * bw * 1e3) // GB/s = 1e3 bytes/us
}

// FusedUs estimates one fused call on device (a deviceProperties name, e.g. "NVIDIA H200")
// with the same rules as an analysis: memory-bound chains take Bytes (less the writes L2
// absorbs) / bandwidth plus one kernel's overhead; layernorm_linear keeps the GEMM (as a Triton GEMM runs it: GemmRatio,
// GemmFixedUs) and adds its stats pass as a kernel; linear_gelu keeps the GEMM likewise and
// adds EpilogueOverhead of one pass over its output. The
// bandwidth is m.BandwidthGBs, else the device table's; ok is false when neither is known.
func (m CostModel) FusedUs(device string, s Shape) (us float64, ok bool) {
	m = m.withDefaults()
	bw, overhead := m.BandwidthGBs, m.KernelOverheadUs
	if bw <= 0 {
		d, found := m.device(device)
		if !found {
			return 0, false
		}
		bw = d.BandwidthGBs * d.Efficiency
	}
	if overhead <= 0 {
		overhead = m.DefaultKernelOverheadUs
	}
	if d, found := m.device(device); found && m.L2Bytes == 0 {
		m.L2Bytes = d.L2Bytes
	}
	p := patternByID(s.Pattern)
	switch p.GEMM {
	case GEMMStats:
		return m.fusedGemmUs(s.GemmUs, s.GemmElemSize) + float64(s.ExtraBytes)/(m.FusedEfficiency*bw*1e3) + overhead + m.RowKernelUs, s.GemmUs > 0
	case GEMMEpilogue:
		return m.fusedGemmUs(s.GemmUs, s.GemmElemSize) + m.EpilogueOverhead*float64(s.ExtraBytes)/(m.FusedEfficiency*bw*1e3), s.GemmUs > 0
	}
	if p.RowKernel() {
		overhead += m.RowKernelUs
	}
	return m.streamUs(p, s.Bytes, s.WriteBytes, bw) + overhead, true
}
