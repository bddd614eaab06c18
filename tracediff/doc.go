// Package tracediff compares two profiles of the same workload, one taken before the fused
// kernels were applied and one after: step time, GPU busy time, kernel launches and op
// counts, each pattern's chains (instances and GPU time, from the analysis of each trace),
// the kernels that appeared and disappeared, and whether the saving the analysis of the
// first trace predicted arrived in the second. The diff verb is a thin main over it.
package tracediff
