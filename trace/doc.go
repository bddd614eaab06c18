// Package trace reads PyTorch profiler (Kineto) traces into a small in-memory model.
//
// Open reads one .json or .json.gz trace (also the legacy top-level array form),
// OpenDir reads a directory of rank files concurrently, and Load dispatches
// between them:
//
//	ts, err := trace.Load(path) // []*trace.Trace, one per rank file
//
// The model (model.go) has CPU ops per thread as a time-nesting tree, GPU
// activities (kernels, memcpys, memsets) linked to the op that launched them
// through the CUPTI correlation id (activity -> runtime launch event -> innermost
// enclosing op on the launch's thread), forward->backward op links, python_function
// frames and profiler steps. Times are int64 nanoseconds on the absolute clock
// (baseTimeNanoseconds added); they are parsed from the decimal text, never through
// float64.
//
// Errors are *Error values naming the file and, where known, the byte offset in
// the (decompressed) JSON text. Tolerated problems (negative times clamped to 0,
// kernels launched before the window, ...) are listed in Trace.Warnings.
package trace
