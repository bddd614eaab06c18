// Package analysis is the analyze verb as a library: it loads a trace (or a directory of
// rank files, with an optional execution trace), runs the pattern catalog over it
// (patterns.Analyze), summarizes the trace (top kernels and ops, idle time, launches) and
// renders the result as a table, Markdown or the JSON of the catalog's contract, which it
// also reads back (gen -from). cmd/fuseadvise is a thin main over it, as pprof's main is
// over its driver.
package analysis
