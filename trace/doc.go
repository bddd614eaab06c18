// Package trace reads PyTorch profiler (Kineto) traces into a small in-memory model.
//
// # Reading
//
//	ts, err := trace.Load(path)       // a file or a directory of rank files: []*Trace
//	t, err := trace.Open("x.json.gz") // one .json / .json.gz file (also the legacy top-level array)
//	ts, err := trace.OpenDir(dir)     // *.pt.trace.json[.gz] and *.json[.gz] with traceEvents; sorted by rank, then path
//
// Uncompressed files are memory-mapped and parsed in parallel chunks (split on the
// writer's event lines); .json.gz files are decompressed into memory first. The
// parser copies every string it keeps, so a Trace does not refer to the file.
//
// Errors are *Error{Path, Offset, Msg}: the byte offset is in the (decompressed) JSON
// text, -1 when unknown. Truncated files, non-JSON, JSON without traceEvents, empty
// traces, NaN or unparseable times and bad syntax (e.g. unescaped quotes) are errors.
// Tolerated problems are listed in Trace.Warnings: negative ts/dur (clamped to 0),
// invalid UTF-8 (repaired), GPU activities launched before the profile window, traces
// without GPU activity. Control characters inside strings are accepted, and the args
// of events the model does not use (python_function, flows, ...) are skipped without
// validation.
//
// # Model (model.go)
//
// All times are int64 nanoseconds on the absolute clock (baseTimeNanoseconds added),
// parsed from the decimal text, never through float64.
//
//   - Ops: cpu_op and user_annotation events, sorted by (thread, start, -dur, Ev Idx);
//     per-thread time-nesting tree (Parent, Children, Thread.Roots). Inputs are decoded
//     from Input Dims / Input type / Input Strides / Concrete Inputs; equal records share
//     one read-only []Input.
//   - Acts: kernels, memcpys and memsets sorted by start. Act.Op is found by correlation:
//     activity -> the runtime event with the same correlation (cuda_runtime,
//     cuda_driver, hip*) -> the innermost op enclosing the launch on its pid/tid
//     (correlation 0 counts as none). External id is kept only as a cross-check.
//     Op.Acts lists the activities an op launched directly; CUDA-graph launches (one
//     correlation, many kernels) set Act.Graph.
//   - Fwd/Bwd: fwdbwd (fwd_bwd, forward_backward) flows bound by (pid, tid, ts) when
//     the trace has them, else sequence numbers (latest-starting forward and backward
//     op of each number).
//   - Python: python_function frames nested per (pid, tid); Op.Py is the innermost frame
//     enclosing the op on its thread.
//   - Steps: ProfilerStep#N user annotations, else one synthetic "whole trace" step;
//     Op.Step is the step containing the op's start.
//
// # Summaries
//
// GPUBusyNs (union of activity intervals per device, summed), IdleNs (device idle
// time within steps), KernelCount, LaunchCount (runtime events named *Launch*),
// EventCount(kind), Events, FwdBwdLinks, TopKernels(n) and TopOps(n) (inclusive GPU
// time of the activities an op and its descendants launched).
//
// # Execution traces
//
// ReadET reads a *.et.json[.gz] execution trace (nodes with input/output tensors:
// [tensor_id, storage_id, offset, numel, itemsize, device]); (*ExecTrace).Join maps
// OpIDs to nodes through rf_id == Op.RecordFunctionID.
package trace
