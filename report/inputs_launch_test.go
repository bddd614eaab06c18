package report

import "testing"

func TestLaunchModeAndUse(t *testing.T) {
	for _, tc := range []struct {
		kernel, graph, compiled float64
		mode                    string
		use                     Use
	}{
		{0, 0, 0, LaunchEager, UseEager},
		{100, 0, 0, LaunchEager, UseEager},
		{100, 49, 0, LaunchEager, UseEager},
		{100, 50, 0, LaunchGraphs, UseGraphs},
		{100, 90, 90, LaunchGraphs, UseGraphs},
		{100, 0, 9, LaunchEager, UseEager},
		{100, 0, 10, LaunchCompiled, UseGraphs},
	} {
		mode := LaunchModeOf(tc.kernel, tc.graph, tc.compiled)
		if mode != tc.mode {
			t.Errorf("LaunchModeOf(%v, %v, %v) = %q, want %q", tc.kernel, tc.graph, tc.compiled, mode, tc.mode)
		}
		if use := UseFor(&TraceExtra{LaunchMode: mode}); use != tc.use {
			t.Errorf("UseFor(%q) = %v, want %v", mode, use, tc.use)
		}
	}
	if UseFor(nil) != UseEager || UseFor(&TraceExtra{}) != UseEager {
		t.Error("no summary, or one from before the launch mode was recorded: want UseEager")
	}
}
