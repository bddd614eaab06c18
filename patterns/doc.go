// Package patterns finds chains of PyTorch ops worth fusing in a profiler trace
// and estimates what fusing them would save.
//
// # Dataflow
//
// The ops matched are the ones the program called directly: cpu_ops whose
// enclosing ops are only annotations (ProfilerStep#N, record_function). Nested
// ops (aten::t inside aten::linear, the autocast re-dispatch of an op to itself,
// a kernel's helper ops) are never matched on their own.
//
// A Kineto trace records no tensor identities, so edges are inferred from what
// it does record (graph.infer): per-op shape rules (shape.go) give each op's
// output sizes and type from its Input Dims, Input type and Concrete Inputs
// (pointwise ops broadcast; norms and softmax keep the shape; linear, addmm,
// matmul and bmm produce [..., N]; views reshape by their size argument), and
// each activation input reads the newest earlier value on its thread with
// exactly its sizes and type. Views and copies (view, reshape, transpose,
// permute, expand, to, clone, contiguous, split, ...) and dropouts that do not
// run (eval mode or p = 0) pass a value through. Weights and biases of known
// ops are parameters, never matched. When several inputs of one op compete for
// equal-shaped values (a residual add), the input whose candidate is newest
// takes it; the others skip the values on the unary chain that produced it (in
// x + f(x), x is not an intermediate of f) and prefer a normalization's input
// over its output (pre-norm blocks x + f(norm(x)) re-read x). No value crosses
// a thread, a profiler step, an optimizer step, or an explicit device
// synchronize between ops.
//
// With an execution trace (Options.ET), edges come from its exact tensor ids
// instead (graph.fromET): an input reads the last op that output the same id.
//
// # Catalog
//
// Catalog lists the patterns (ids are a contract, see docs/patterns.md): each
// has anchors (the op a match starts from), a matcher that checks the dataflow
// edges and shape constraints, and what it refuses. Matching is one pass over
// the ops, each tried only against the patterns it anchors, so detection is
// linear in the number of ops. Every instance carries what a kernel generator
// needs, as validated numbers and enums (Params): dtype, shapes, GELU
// approximation, mask kind and broadcast shape, scale, eps, dropout p, RMSNorm
// casting style.
//
// The catalog is the registry (registry.go): each entry also declares its fused kernel's
// kind, template folder, parameter schema (params.go), the mapping of a shape group to the
// kernel case codegen generates (casespec.go), advice and usage snippet. The later stages
// read the entry instead of deciding by pattern name; docs/adding-a-pattern.md says what a
// new pattern needs and what the registry tests check.
//
// # Cost
//
// CostModel holds every assumption of the estimates. Per instance: the GPU
// time of the kernels its ops (and their nested ops) launched, the fewest bytes
// one fused kernel must move, and a fused time of max(bytes / bandwidth, flops
// / compute) plus one kernel's fixed overhead. Chains with GEMMs keep the GEMMs'
// measured time and add only what fusion cannot remove. Bandwidth is calibrated
// from the trace's own large memory-bound kernels where it has enough of them,
// else taken from a device table.
//
// Analyze runs it all over the ranks of one run and returns a Report that
// marshals to the JSON contract of `fuseadvise analyze --format json`.
package patterns
