package patterns

import (
	"math"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

func TestFusedUsWithoutTrace(t *testing.T) {
	m := DefaultCostModel()
	bw := m.FusedEfficiency * 4250e3 // the H200's 4250 GB/s, in bytes per us
	// 536,903,680 bytes (bias+GELU, bf16 8192x16384) + the default 1.1 us overhead
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "bias_gelu", Bytes: 536903680}); !ok || math.Abs(us-(536903680/bw+1.1)) > 1e-9 {
		t.Errorf("bias_gelu: %v %v", us, ok)
	}
	// layernorm_linear keeps the GEMM and adds the stats pass (x read + 8 B/row) as a row
	// kernel: the Triton GEMM where it is the faster (a small GEMM, many bytes), the library
	// path (the traced GEMM, the stats, the normalized input written) where that is
	rowBytes := m.RowEfficiency * 4250e3
	stats := float64(int64(rowBytes))/rowBytes + 1.1 + m.RowKernelUs
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "layernorm_linear", GemmUs: 4, ExtraBytes: int64(rowBytes)}); !ok ||
		math.Abs(us-(m.GemmRatio16*4+stats)) > 1e-9 {
		t.Errorf("layernorm_linear, Triton GEMM: %v %v", us, ok)
	}
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "layernorm_linear", GemmUs: 400, ExtraBytes: int64(rowBytes)}); !ok ||
		math.Abs(us-(400+stats+2*float64(int64(rowBytes))/bw+1.1)) > 1e-9 {
		t.Errorf("layernorm_linear, library path: %v %v", us, ok)
	}
	// linear_gelu: the GEMM and EpilogueOverhead of a pass over its output; fp32 operands
	// take GemmRatio32; a large 16-bit GEMM over few bytes takes the library path (the GEMM
	// as traced, a pass reading and writing its output)
	if us, _ := m.FusedUs("NVIDIA H200", Shape{Pattern: "linear_gelu", GemmUs: 4, ExtraBytes: int64(bw), GemmElemSize: 4}); math.Abs(us-(m.GemmRatio32*4+m.EpilogueOverhead)) > 1e-6 {
		t.Errorf("fp32 linear_gelu: %v", us)
	}
	if us, _ := m.FusedUs("NVIDIA H200", Shape{Pattern: "linear_gelu", GemmUs: 400, ExtraBytes: int64(bw), GemmElemSize: 2}); math.Abs(us-(400+2+1.1)) > 1e-6 {
		t.Errorf("linear_gelu, library path: %v", us)
	}
	if _, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "linear_gelu"}); ok {
		t.Error("a GEMM pattern without its GEMM time must not be estimated")
	}
	if _, ok := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: 1 << 20}); ok {
		t.Error("an unknown device without a bandwidth option must not be estimated")
	}
	m.BandwidthGBs = 1000
	if us, _ := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: int64(m.FusedEfficiency * 1e6)}); math.Abs(us-2.1) > 1e-6 {
		t.Errorf("with a bandwidth option: %v", us)
	}
}

// L2 absorbs the writes of a kernel whose footprint fits in it: all of them up to
// L2AbsorbAll of L2, none from L2AbsorbNone, linearly in between; no L2 known, no effect.
func TestStreamL2(t *testing.T) {
	m := DefaultCostModel().withDefaults()
	m.FusedEfficiency, m.L2Bytes = 1, 100
	tests := []struct {
		bytes, writes int64
		want          float64 // bytes charged
	}{
		{60, 30, 30}, // <= 69: writes free
		{69, 30, 39}, // at the edge
		{96, 30, 96}, // >= 96: all charged
		{200, 50, 200},
	}
	for _, tt := range tests {
		if got := m.streamUs(tt.bytes, tt.writes, false, 1e-3); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("streamUs(%d, %d) = %v, want %v", tt.bytes, tt.writes, got, tt.want)
		}
	}
	if got := m.streamUs(82, 27, false, 1e-3); math.Abs(got-(82-27*(96-82)/27.0)) > 1e-9 {
		t.Errorf("between the bounds: %v", got)
	}
	// warm (timed back to back): WarmReadShare of the reads served as well
	m.WarmReadShare = 0.5
	if got := m.streamUs(60, 30, true, 1e-3); math.Abs(got-15) > 1e-9 {
		t.Errorf("warm: %v, want 15 (writes free, half the reads)", got)
	}
	// a row kernel gets RowL2Share of that
	m.KernelOverheadUs, m.RowKernelUs, m.RowEfficiency, m.BandwidthGBs, m.RowL2Share = 1, 0.5, 1, 1e-3, 0.5
	if got := m.rowUs(60, 30, false); math.Abs(got-(45+1.5)) > 1e-9 {
		t.Errorf("row kernel: %v, want 46.5 (half the writes' discount)", got)
	}
	if got := m.rowUs(200, 50, true); math.Abs(got-(200+1.5)) > 1e-9 {
		t.Errorf("row kernel beyond L2: %v, want 201.5", got)
	}
	m.L2Bytes = 0
	if got := m.streamUs(60, 30, true, 1e-3); got != 60 {
		t.Errorf("no L2: %v, want 60", got)
	}
}

// CostCases gives, per shape group, what Analyze's estimate rests on: FusedUs on its Shape with
// the trace's calibration gives back Analyze's est_fused_us per call (the cost fit relies on it).
func TestCostCasesAgreeWithAnalyze(t *testing.T) {
	tr, err := trace.Open("../testdata/traces/mlp_blocks_infer_fp32.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ccs, err := CostCases(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for _, o := range r.Opportunities {
		for _, g := range o.Shapes {
			want[o.Pattern+FormatDims(g.Dims)+string(g.DType)] = g.EstFusedUs / float64(g.Instances)
		}
	}
	if len(ccs) != len(want) || len(ccs) < 3 {
		t.Fatalf("%d cost cases, %d shape groups", len(ccs), len(want))
	}
	m := DefaultCostModel()
	for _, c := range ccs {
		k := c.Shape.Pattern + FormatDims(c.Group.Dims) + string(c.Group.DType)
		got, ok := m.Calibrated(c.Calibration).FusedUs(r.Trace.Device, c.Shape)
		if !ok || math.Abs(got-want[k]) > 0.01+1e-3*want[k] {
			t.Errorf("%s: FusedUs on the cost case %v (%v), Analyze %v", k, got, ok, want[k])
		}
	}
}
