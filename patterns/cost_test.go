package patterns

import (
	"math"
	"testing"
)

func TestFusedUsWithoutTrace(t *testing.T) {
	m := DefaultCostModel()
	// 536,903,680 bytes (bias+GELU, bf16 8192x16384) at the H200's 4250 GB/s + 2 us overhead
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "bias_gelu", Bytes: 536903680}); !ok || math.Abs(us-(536903680/(0.92*4250e3)+2)) > 1e-9 {
		t.Errorf("bias_gelu: %v %v", us, ok)
	}
	// layernorm_linear keeps the GEMM and adds the stats pass (x read + 8 B/row) as a kernel
	if us, ok := m.FusedUs("NVIDIA H200", Shape{Pattern: "layernorm_linear", GemmUs: 400, ExtraBytes: 0.92 * 4250e3}); !ok || math.Abs(us-(1.1*400+6+1+2)) > 1e-9 {
		t.Errorf("layernorm_linear: %v %v", us, ok)
	}
	if _, ok := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: 1 << 20}); ok {
		t.Error("an unknown device without a bandwidth option must not be estimated")
	}
	m.BandwidthGBs = 1000
	if us, _ := m.FusedUs("Some Unknown GPU", Shape{Pattern: "swiglu", Bytes: 0.92 * 1e6}); math.Abs(us-3) > 1e-9 {
		t.Errorf("with a bandwidth option: %v", us)
	}
}
