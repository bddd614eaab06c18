package report

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

func TestCoverageOf(t *testing.T) {
	tests := []struct {
		name string
		c    *patterns.Coverage
		want string // "" for no line
		not  string // text the line must not hold
	}{
		{"an analysis from before coverage", nil, "", ""},
		{"no memory-bound kernel", &patterns.Coverage{ComputeUs: 10}, "", ""},
		{"nothing claimed", &patterns.Coverage{MemoryBoundUs: 250, MemoryBoundKernels: 4},
			"Coverage: the chains found claim none of the memory-bound kernel time (250 µs; kernels not launched by a GEMM, convolution or attention op).", ""},
		{"the counted set claims as much as every chain", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 50, CountedKernels: 2, CountedPct: 25,
			ClaimedWithBackwardUs: 120, ClaimedWithBackwardPct: 60, CountedWithBackwardUs: 120, CountedWithBackwardPct: 60},
			"Coverage: the chains found claim 25% of the memory-bound kernel time (50.0 of 200 µs; kernels not launched by a GEMM, convolution or attention op), 60% with their backward kernels.",
			"counted"},
		{"overlapping chains", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 10, CountedKernels: 1, CountedPct: 5,
			ClaimedWithBackwardUs: 120, ClaimedWithBackwardPct: 60, CountedWithBackwardUs: 20, CountedWithBackwardPct: 10},
			"; the counted chains 5.0% (10.0 µs), 10% with their backward.", ""},
		{"inference: no backward", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 10, CountedKernels: 1, CountedPct: 5,
			ClaimedWithBackwardUs: 50, ClaimedWithBackwardPct: 25, CountedWithBackwardUs: 10, CountedWithBackwardPct: 5},
			"(50.0 of 200 µs; kernels not launched by a GEMM, convolution or attention op); the counted chains 5.0% (10.0 µs).", "backward"},
		{"where the rest goes: the four largest", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 50, CountedKernels: 2, CountedPct: 25,
			ClaimedWithBackwardUs: 50, ClaimedWithBackwardPct: 25, CountedWithBackwardUs: 50, CountedWithBackwardPct: 25,
			Unclaimed: []patterns.UnclaimedOp{{Op: "optimizer step (AdamW)", Us: 80, Kernels: 4, Pct: 40},
				{Op: "ToCopyBackward0", Us: 30, Kernels: 1, Pct: 15}, {Op: "aten::to in aten::linear", Us: 20, Kernels: 1, Pct: 10},
				{Op: "MulBackward0", Us: 10, Kernels: 1, Pct: 5}, {Op: "aten::cat", Us: 5, Kernels: 1, Pct: 2.5}}},
			"(50.0 of 200 µs; kernels not launched by a GEMM, convolution or attention op). Not claimed, the most: " +
				"optimizer step (AdamW) 80.0 µs (40%), ToCopyBackward0 30.0 µs (15%), aten::to in aten::linear 20.0 µs (10%), MulBackward0 10.0 µs (5.0%). " +
				"No chain holds an optimizer step: torch.optim's fused=True (Adam, AdamW, SGD) runs its updates in a few fused kernels.",
			"aten::cat"},
		{"autocast's casts into GEMMs named, with what removes them", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 50, CountedKernels: 2, CountedPct: 25,
			ClaimedWithBackwardUs: 50, ClaimedWithBackwardPct: 25, CountedWithBackwardUs: 50, CountedWithBackwardPct: 25,
			Unclaimed: []patterns.UnclaimedOp{{Op: "ToCopyBackward0", Us: 30, Kernels: 1, Pct: 15}},
			Autocast:  &patterns.AutocastCasts{WeightsUs: 12, ActivationsUs: 18, ForwardUs: 10, BackwardUs: 20, Kernels: 3, Pct: 15}},
			"Autocast's casts into GEMMs take 30.0 µs of it (15% of the memory-bound time; weights 12.0 µs, activations 18.0 µs; " +
				"20.0 µs of it ToCopyBackward0, the gradients cast back): torch.compile fuses an activation's casts", ""},
		{"autocast's casts under 1%: not named", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 50, CountedKernels: 2, CountedPct: 25,
			ClaimedWithBackwardUs: 50, ClaimedWithBackwardPct: 25, CountedWithBackwardUs: 50, CountedWithBackwardPct: 25,
			Unclaimed: []patterns.UnclaimedOp{{Op: "aten::cat", Us: 30, Kernels: 1, Pct: 15}},
			Autocast:  &patterns.AutocastCasts{WeightsUs: 1, ForwardUs: 1, Kernels: 1, Pct: 0.5}},
			"Not claimed, the most: aten::cat 30.0 µs (15%).", "Autocast"},
		{"a fused optimizer: no advice to fuse it", &patterns.Coverage{MemoryBoundUs: 200, MemoryBoundKernels: 8,
			ClaimedUs: 50, ClaimedKernels: 2, ClaimedPct: 25, CountedUs: 50, CountedKernels: 2, CountedPct: 25,
			ClaimedWithBackwardUs: 50, ClaimedWithBackwardPct: 25, CountedWithBackwardUs: 50, CountedWithBackwardPct: 25,
			Unclaimed: []patterns.UnclaimedOp{{Op: "optimizer step (AdamW, fused)", Us: 80, Kernels: 1, Pct: 40}}},
			"Not claimed, the most: optimizer step (AdamW, fused) 80.0 µs (40%).", "fused=True"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CoverageOf(&patterns.Report{Coverage: tc.c})
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Errorf("got %q, which says %q", got, tc.not)
			}
		})
	}
	if CoverageOf(nil) != "" {
		t.Error("no analysis: a coverage line")
	}
}
