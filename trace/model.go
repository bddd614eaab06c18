package trace

// This file is the in-memory model every later stage reads. Keep it small: the
// detector (patterns/), pprof export and the analyze summary depend on exactly these
// fields. Times are int64 nanoseconds on the trace's absolute clock (baseTimeNanoseconds
// added where the trace has one). Indices (OpID, ActID, ...) are positions in the
// Trace's slices; -1 means "none".

// Kind classifies an event by its category ("cat"), never by pid/tid.
type Kind uint8

const (
	KindOther          Kind = iota
	KindCPUOp               // cpu_op, Operator (legacy)
	KindUserAnnotation      // user_annotation, ProfilerStep#N, record_function
	KindPython              // python_function
	KindRuntime             // cuda_runtime, Runtime (legacy), cuda_driver, hip*: launch-side events
	KindKernel              // kernel, Kernel (legacy)
	KindMemcpy              // gpu_memcpy, Memcpy (legacy)
	KindMemset              // gpu_memset, Memset (legacy)
	KindGPUAnnotation       // gpu_user_annotation
)

func (k Kind) String() string {
	switch k {
	case KindCPUOp:
		return "cpu_op"
	case KindUserAnnotation:
		return "user_annotation"
	case KindPython:
		return "python_function"
	case KindRuntime:
		return "runtime"
	case KindKernel:
		return "kernel"
	case KindMemcpy:
		return "gpu_memcpy"
	case KindMemset:
		return "gpu_memset"
	case KindGPUAnnotation:
		return "gpu_user_annotation"
	}
	return "other"
}

// Trace is one rank's profile (one file).
type Trace struct {
	Path       string
	Rank       int // distributedInfo.rank; -1 when the file does not say
	WorldSize  int // 0 when unknown
	BaseTimeNs int64
	Devices    []Device // deviceProperties, in file order
	// Meta holds scalar top-level metadata as text (record_shapes, with_stack,
	// cuda_runtime_version, ...).
	Meta map[string]string

	Threads []Thread   // CPU threads that have ops, sorted by (pid, tid)
	Ops     []Op       // cpu_op and user_annotation events, sorted by (thread, start, -dur, EvIdx)
	Python  []PyFrame  // python_function events (empty without with_stack)
	Acts    []Activity // GPU activities: kernels, memcpys, memsets; sorted by start
	Steps   []Step     // ProfilerStep#N spans; one synthetic whole-trace step when there are none

	// Warnings are things the parser tolerated (skipped malformed events, kernels
	// whose launch predates the window, ...), one line each, for the user.
	Warnings []string

	stats stats // event counts kept for the summary helpers (summary.go)
}

// Device is one entry of deviceProperties.
type Device struct {
	ID             int
	Name           string
	TotalGlobalMem int64
	ComputeMajor   int
	ComputeMinor   int
	NumSMs         int
}

// Thread is one CPU thread (pid, tid as written in the file, ints or strings).
type Thread struct {
	Pid, Tid string
	Name     string  // from thread_name metadata, if any
	Roots    []int32 // OpIDs of top-level ops, in time order
	// Syncs are the start times (ns) of device-wide synchronizations called on this
	// thread (cudaDeviceSynchronize, cuCtxSynchronize, hipDeviceSynchronize), in
	// time order: explicit torch.cuda.synchronize() calls, which mark loop
	// iterations in benchmarks.
	Syncs []int64
}

// Op is one CPU-side operator or annotation.
type Op struct {
	Name   string
	Kind   Kind // KindCPUOp or KindUserAnnotation
	Thread int32
	Start  int64 // ns
	Dur    int64 // ns

	Parent   int32   // enclosing op on the same thread, -1 for roots
	Children []int32 // directly nested ops, in time order

	ExternalID       int64 // -1 when absent
	RecordFunctionID int64 // "Record function id"; -1 when absent (joins to the execution trace's rf_id)
	EvIdx            int64 // "Ev Idx" / "Profiler Event Index"; -1 when absent
	Seq              int64 // "Sequence number"; -1 when absent
	FwdThreadID      int64 // "Fwd thread id"; -1 when absent (0 = a forward op)

	Inputs []Input // from Input Dims / Input type / Input Strides / Concrete Inputs; nil without record_shapes

	// Acts are the GPU activities this op launched directly (through a runtime
	// event whose innermost enclosing op is this one), in launch order.
	Acts []int32
	// Bwd is the backward op linked to this forward op (sequence number, latest start
	// among equals, or the fwdbwd flow); Fwd the reverse. -1 when none.
	Bwd, Fwd int32
	// Py is the innermost python_function frame enclosing the op on its thread; -1 if none.
	Py int32
	// Step is the index in Trace.Steps whose span contains the op's start; -1 if none.
	Step int32
}

// Input is one operator argument as the profiler recorded it.
type Input struct {
	Type     string    // "float", "c10::BFloat16", "c10::Half", "long int", "Scalar", "TensorList", "" (None), ...
	Dims     []int64   // tensor sizes; nil for scalars, None, lists (a 0-dim tensor has Dims == nil and IsTensor)
	Strides  []int64   // tensor strides when recorded
	List     [][]int64 // element sizes of a TensorList (or a list of ints for int[] args such as a view's size)
	Concrete string    // Concrete Inputs text: "1", "-1", "[-1]", "True", "0.125", "" for tensors
}

// PyFrame is one python_function event (with_stack=True traces).
type PyFrame struct {
	Name   string // e.g. "transformers/models/gpt2/modeling_gpt2.py(345): forward"
	Thread int32  // index into Threads when the frame's pid/tid is a CPU thread, else -1
	Start  int64
	Dur    int64
	Parent int32 // enclosing frame, -1 for roots
}

// ActKind is the kind of a GPU activity.
type ActKind uint8

const (
	ActKernel ActKind = iota
	ActMemcpy
	ActMemset
)

// Activity is one kernel, memcpy or memset on a GPU.
type Activity struct {
	Name        string
	Kind        ActKind
	Device      int   // device ordinal as written (pid for kernels; ROCm: HSA index)
	Stream      int64 // tid / args.stream
	Start       int64
	Dur         int64
	Correlation int64 // -1 when absent
	ExternalID  int64 // -1 when absent; only a cross-check, see trace-format notes
	Grid, Block [3]int32
	Bytes       int64 // memcpy/memset bytes
	// Op is the CPU op that launched it: correlation -> runtime launch event -> innermost
	// enclosing op on the launch's thread. -1 when the launch predates the window or no
	// op encloses it.
	Op int32
	// Launch is the start time (ns) of the runtime event that launched it, -1 if none.
	Launch int64
	Graph  bool // launched by cudaGraphLaunch (one correlation, many kernels)
}

// Step is one profiler step (ProfilerStep#N) on the CPU timeline.
type Step struct {
	Name  string // "ProfilerStep#12", or "whole trace"
	Num   int    // N, or -1 for the synthetic step
	Start int64
	Dur   int64
}
