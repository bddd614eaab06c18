package patterns

import (
	"math"
	"testing"
)

func TestFusedUsWithoutTrace(t *testing.T) {
	m := DefaultCostModel()
	// 536,903,680 bytes (bias+GELU, bf16 8192x16384) at the H200's 4250 GB/s + 1.1 us overhead
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "bias_gelu", Bytes: 536903680}); !ok || math.Abs(us-(536903680/(0.92*4250e3)+1.1)) > 1e-9 {
		t.Errorf("bias_gelu: %v %v", us, ok)
	}
	// layernorm_linear keeps the GEMM and adds the stats pass (x read + 8 B/row) as a kernel
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "layernorm_linear", GemmUs: 400, ExtraBytes: 0.92 * 4250e3}); !ok || math.Abs(us-(1.04*400+8.5+1+1.1+0.5)) > 1e-9 {
		t.Errorf("layernorm_linear: %v %v", us, ok)
	}
	// a small GEMM pays at most half its time as the fixed cost
	if us, _ := m.FusedUs("NVIDIA H200", Shape{Pattern: "linear_gelu", GemmUs: 4}); math.Abs(us-(1.04*4+2)) > 1e-9 {
		t.Errorf("small linear_gelu: %v", us)
	}
	if _, ok := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: 1 << 20}); ok {
		t.Error("an unknown device without a bandwidth option must not be estimated")
	}
	m.BandwidthGBs = 1000
	if us, _ := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: 0.92 * 1e6}); math.Abs(us-2.1) > 1e-9 {
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
		if got := m.streamUs(patternByID("swiglu"), tt.bytes, tt.writes, 1e-3); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("streamUs(%d, %d) = %v, want %v", tt.bytes, tt.writes, got, tt.want)
		}
	}
	if got := m.streamUs(patternByID("swiglu"), 82, 27, 1e-3); math.Abs(got-(82-27*(96-82)/27.0)) > 1e-9 {
		t.Errorf("between the bounds: %v", got)
	}
	if got := m.streamUs(patternByID("rmsnorm_pyops"), 60, 30, 1e-3); got != 60 {
		t.Errorf("a row kernel is charged all its bytes: %v, want 60", got)
	}
	m.L2Bytes = 0
	if got := m.streamUs(patternByID("swiglu"), 60, 30, 1e-3); got != 60 {
		t.Errorf("no L2: %v, want 60", got)
	}
}
