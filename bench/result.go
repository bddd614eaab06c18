package bench

// Result is one benchmark run on one GPU: what `fuseadvise bench` writes as JSON and what
// `report` and `pr` read. Times are medians in microseconds unless a name says otherwise;
// each timed figure also has its p20 and p80 (triton.testing.do_bench quantiles).
type Result struct {
	GPU      string  `json:"gpu"`
	Torch    string  `json:"torch"`
	Triton   string  `json:"triton"`
	CopyTBps float64 `json:"copy_tbps"` // measured device-to-device copy bandwidth, bytes read + written
	Command  string  `json:"command,omitempty"`
	Date     string  `json:"date,omitempty"`
	Cases    []Case  `json:"cases"`
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
	FloorUs       float64   `json:"floor_us"`                 // fewest bytes / copy bandwidth (or FLOPs / GEMM rate)
	CopyUs        float64   `json:"copy_us,omitempty"`        // an elementwise copy moving the same bytes, timed the same way: the memory system's ceiling at this size
	PredictedUs   float64   `json:"predicted_us,omitempty"`   // the analyzer's estimate of the fused time
	PredictedFrom string    `json:"predicted_from,omitempty"` // FromAnalysis or FromCostModel
	// PredictedGapUs is the part of PredictedUs that is the launch gaps of back-to-back
	// timing (cases timed with do_bench_cudagraph): the model estimates kernel durations.
	PredictedGapUs float64 `json:"predicted_gap_us,omitempty"`
	Bytes          int64   `json:"bytes"`
	Flops          float64 `json:"flops,omitempty"`
	Launches       int     `json:"launches"` // kernel launches of the fused version
	EagerLaunches  int     `json:"eager_launches,omitempty"`
	CUDAGraph      bool    `json:"cuda_graph,omitempty"` // timed with do_bench_cudagraph (µs-scale cases)
	// Timing says how each provider was timed: "graph-replay" (its CUDA-graph replay under
	// do_bench, L2 flushed: GPU time only), "cudagraph" (do_bench_cudagraph, µs-scale cases)
	// or "call" (the Python call itself, when it could not be captured).
	Timing map[string]string `json:"timing,omitempty"`
	Config string            `json:"config,omitempty"` // the autotuner's chosen config
}
