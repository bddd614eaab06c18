package bench

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Result is one benchmark run on one GPU: what `fuseadvise bench` writes as JSON and what
// `report` and `pr` read. Times are medians in microseconds unless a name says otherwise;
// each GPU time of the main providers also has its p20 and p80.
//
// Two figures per provider. GPU time (FusedUs, ...): the provider's CUDA-graph replay timed
// by CUDA events around the call alone, L2 emptied of dirty lines before every call
// (fa_testing.gpu_time_us), or, for microsecond-scale cases (CUDAGraph), many calls back to
// back in one graph, L2-warm. Per call (FusedWallUs, FusedHostUs, ...): the provider called
// as an eager model calls it, no CUDA graph (fa_testing.wall_time_us). Results written
// before the per-call figures have them all zero.
type Result struct {
	GPU      string  `json:"gpu"`
	Torch    string  `json:"torch"`
	Triton   string  `json:"triton"`
	CopyTBps float64 `json:"copy_tbps"` // measured device-to-device copy bandwidth, bytes read + written
	// FlushBytes is the size of each of the two buffers of the L2 flush before every timed
	// call, one written and then one read, so that no dirty line is left to be written back
	// inside the timed call. 0: a result from before, timed by triton.testing.do_bench, whose
	// flush only writes 256 MiB (4.5 µs of RMSNorm bf16 8192x4096's 38.4 on the H200 was
	// that write-back).
	FlushBytes int64  `json:"flush_bytes,omitempty"`
	Command    string `json:"command,omitempty"`
	Date       string `json:"date,omitempty"`
	Cases      []Case `json:"cases"`
}

// Case is one generated kernel at one shape and dtype.
type Case struct {
	Pattern string    `json:"pattern"`
	Name    string    `json:"name,omitempty"` // the generated folder's name
	Shape   []int64   `json:"shape"`          // the main input's shape
	Shapes  [][]int64 `json:"shapes,omitempty"`
	Dtype   string    `json:"dtype"`

	Correct bool   `json:"correct"`         // GPU check against the reference passed
	Error   string `json:"error,omitempty"` // why it was not timed

	FusedUs float64 `json:"fused_us"`
	// Spreads are the min..max of the repeated runs' medians: a difference smaller than
	// them is noise.
	FusedSpread   []float64 `json:"fused_spread_us,omitempty"`
	EagerSpread   []float64 `json:"eager_spread_us,omitempty"`
	CompileSpread []float64 `json:"compile_spread_us,omitempty"`
	FusedP20      float64   `json:"fused_p20_us"`
	FusedP80      float64   `json:"fused_p80_us"`
	EagerUs       float64   `json:"eager_us"`
	EagerP20      float64   `json:"eager_p20_us"`
	EagerP80      float64   `json:"eager_p80_us"`
	CompileUs     float64   `json:"compile_us"`
	CompileP20    float64   `json:"compile_p20_us"`
	CompileP80    float64   `json:"compile_p80_us"`
	CompileMaxUs  float64   `json:"compile_max_autotune_us,omitempty"`
	GemmOnlyUs    float64   `json:"gemm_only_us,omitempty"`   // GEMM patterns: the GEMM alone
	FloorUs       float64   `json:"floor_us"`                 // fewest bytes / copy bandwidth (or FLOPs / GEMM rate), of the case's mode; 0 for a training mode without one
	CopyUs        float64   `json:"copy_us,omitempty"`        // an elementwise copy moving the same bytes, timed the same way: the memory system's ceiling at this size
	PredictedUs   float64   `json:"predicted_us,omitempty"`   // the analyzer's estimate of the fused time
	PredictedFrom string    `json:"predicted_from,omitempty"` // FromAnalysis or FromCostModel
	// PredictedGapUs is the part of PredictedUs that is the launch gaps of back-to-back
	// timing (cases timed with do_bench_cudagraph): the model estimates kernel durations.
	PredictedGapUs float64 `json:"predicted_gap_us,omitempty"`
	// Bytes and Flops are the floor's figures for the case's mode: the fewest bytes moved and
	// the GEMM FLOPs (the forward's, the backward's, or both summed in "full").
	Bytes int64   `json:"bytes"`
	Flops float64 `json:"flops,omitempty"`
	// Mode is what was timed: "forward" (also when empty: results written before modes),
	// "backward" (the backward from one forward's saved state) or "full" (forward and
	// backward); a folder timed in several modes has one Case per mode.
	Mode string `json:"mode,omitempty"`
	// Peak memory of one call beyond what was allocated before it (outputs, temporaries; in
	// training, saved activations and gradients), bytes; 0 when not measured.
	FusedPeakBytes   int64 `json:"fused_peak_bytes,omitempty"`
	EagerPeakBytes   int64 `json:"eager_peak_bytes,omitempty"`
	CompilePeakBytes int64 `json:"compile_peak_bytes,omitempty"`
	Launches         int   `json:"launches"` // kernel launches of the fused version
	EagerLaunches    int   `json:"eager_launches,omitempty"`
	CUDAGraph        bool  `json:"cuda_graph,omitempty"` // timed with do_bench_cudagraph (µs-scale cases)
	// Timing says how each provider's GPU time was taken: "graph-replay" (its CUDA-graph
	// replay, L2 flushed: GPU time only), "cudagraph" (do_bench_cudagraph, µs-scale cases:
	// back to back, L2-warm) or "call" (the Python call itself, when it could not be
	// captured).
	Timing map[string]string `json:"timing,omitempty"`
	Config string            `json:"config,omitempty"` // the autotuner's chosen config

	// Per call, as an eager model calls a kernel (no CUDA graph, no L2 flush). WallUs: the
	// wall time per call of a loop of back-to-back calls (WallCalls of them, about 20 ms)
	// with one synchronize at the end, host overhead and launch gaps included. HostUs: the
	// time for one call to return (Python, checks, allocations, launches), from bursts of
	// calls started on an idle GPU so that a full launch queue never makes the host wait.
	// Medians over the repeats; the wall spreads are their min..max. 0 when not measured.
	FusedWallUs       float64   `json:"fused_wall_us,omitempty"`
	FusedHostUs       float64   `json:"fused_host_us,omitempty"`
	FusedWallSpread   []float64 `json:"fused_wall_spread_us,omitempty"`
	EagerWallUs       float64   `json:"eager_wall_us,omitempty"`
	EagerHostUs       float64   `json:"eager_host_us,omitempty"`
	EagerWallSpread   []float64 `json:"eager_wall_spread_us,omitempty"`
	CompileWallUs     float64   `json:"compile_wall_us,omitempty"`
	CompileHostUs     float64   `json:"compile_host_us,omitempty"`
	CompileWallSpread []float64 `json:"compile_wall_spread_us,omitempty"`
	CompileMaxWallUs  float64   `json:"compile_max_autotune_wall_us,omitempty"`
	CompileMaxHostUs  float64   `json:"compile_max_autotune_host_us,omitempty"`
	GemmOnlyWallUs    float64   `json:"gemm_only_wall_us,omitempty"`
	GemmOnlyHostUs    float64   `json:"gemm_only_host_us,omitempty"`
	// WallCalls is the number of calls in each provider's per-call loop (the last repeat's),
	// by provider: "fused", "eager", "compile", "compile_max", "gemm_only".
	WallCalls map[string]int `json:"wall_calls,omitempty"`
	// WallCopies is set on the training modes' cases: their per-call figures are those of
	// WallCopies chains (own leaves) in one torch.autograd.grad call, over WallCopies, so that
	// the autograd engine's cost per grad call (about 70-95 µs on the H200 machine, paid once
	// per step by a model) is shared as in a step. 0: each call alone (the forward mode).
	WallCopies int `json:"wall_copies,omitempty"`

	// Library holds the library calls that compute the case's forward (the adapter's
	// library_ops: "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex", "rms_norm",
	// "addmm_gelu"), each timed beside the fused kernel in this case's mode or refused with
	// the reason. Nil for cases without library ops (and for predictions without a GPU).
	Library map[string]LibraryCall `json:"library,omitempty"`
	// The fastest of them by kind: SDPA (the fastest backend that ran, SdpaBackend "flash",
	// "efficient" or "cudnn"), FlexAttention, and any other library op (LibraryOp names it).
	SdpaUs      float64 `json:"sdpa_us,omitempty"`
	SdpaBackend string  `json:"sdpa_backend,omitempty"`
	FlexUs      float64 `json:"flex_us,omitempty"`
	LibraryUs   float64 `json:"library_us,omitempty"`
	LibraryOp   string  `json:"library_op,omitempty"`
	// CompileSDPA, on attention cases: whether Inductor rewrote the eager chain to
	// scaled_dot_product_attention when compiling it (its fuse_attention pattern pass); nil
	// when not recorded.
	CompileSDPA *bool `json:"compile_sdpa,omitempty"`
}

// LibraryCall is one library op's figures in a case, timed as the providers are (GPU time
// with p20/p80 and the repeats' spread, per-call wall and host time, peak memory), or the
// reason it was not timed: Refused, the adapter's reason, the first line of what the op
// raised on its first call (an SDPA backend refusing the case), or its output differing from
// the reference's.
type LibraryCall struct {
	Us         float64   `json:"us,omitempty"`
	P20        float64   `json:"p20_us,omitempty"`
	P80        float64   `json:"p80_us,omitempty"`
	Spread     []float64 `json:"spread_us,omitempty"`
	WallUs     float64   `json:"wall_us,omitempty"`
	HostUs     float64   `json:"host_us,omitempty"`
	WallSpread []float64 `json:"wall_spread_us,omitempty"`
	PeakBytes  int64     `json:"peak_bytes,omitempty"`
	Timing     string    `json:"timing,omitempty"` // as Case.Timing: "graph-replay", "cudagraph" or "call"
	Refused    string    `json:"refused,omitempty"`
}

// CheckLibrary says what is wrong with c's library figures, nil when nothing: every op
// either timed (a positive, finite time) or refused, never both nor neither, and each
// summary field backed by an op that was timed.
func (c *Case) CheckLibrary() error {
	for _, name := range slices.Sorted(maps.Keys(c.Library)) {
		op := c.Library[name]
		timed := op.Us > 0 && !math.IsInf(op.Us, 0)
		switch {
		case name == "":
			return errors.New("a library op with no name")
		case timed && op.Refused != "":
			return fmt.Errorf("library op %q is both timed and refused", name)
		case !timed && op.Refused == "":
			return fmt.Errorf("library op %q has neither a time nor a reason it was refused", name)
		}
	}
	backed := func(field, op string, us float64) error {
		if us == 0 {
			return nil
		}
		if l, ok := c.Library[op]; !ok || l.Us != us {
			return fmt.Errorf("%s %v is not the time of library op %q", field, us, op)
		}
		return nil
	}
	if c.SdpaUs != 0 && c.SdpaBackend == "" {
		return errors.New("sdpa_us without sdpa_backend")
	}
	if err := backed("sdpa_us", "sdpa_"+c.SdpaBackend, c.SdpaUs); err != nil {
		return err
	}
	if err := backed("flex_us", "flex", c.FlexUs); err != nil {
		return err
	}
	return backed("library_us", c.LibraryOp, c.LibraryUs)
}

// launchCounts is the harness's line with a timed folder's kernel launches, printed after
// every folder is timed (a profiler session makes each later launch in the process slower).
type launchCounts struct {
	Name          string `json:"launch_counts"`
	Launches      int    `json:"launches"`
	EagerLaunches int    `json:"eager_launches"`
}

// merge sets the launch counts of the forward case named lc.Name.
func (lc launchCounts) merge(cases []Case) error {
	for i := range cases {
		if cases[i].Name == lc.Name && cases[i].Forward() {
			cases[i].Launches, cases[i].EagerLaunches = lc.Launches, lc.EagerLaunches
			return nil
		}
	}
	return fmt.Errorf("launch counts of %q, a folder with no result", lc.Name)
}

// Forward reports whether c times the forward (Mode "forward", or none: results written
// before modes).
func (c *Case) Forward() bool { return c.Mode == "" || c.Mode == "forward" }
