// Package report turns the pipeline's outputs into what a person reads and what a
// project merges.
//
// Its Inputs are the analysis (`fuseadvise analyze -format json`: the trace summary and
// the ranked fusion opportunities), the generated kernel folders (their manifest.json),
// the verification results and the GPU benchmark results (bench.Result). Any of them may
// be missing; the report then says so rather than guessing.
//
// Markdown and HTML write one report: the trace summary, the ranked opportunities, the
// generated folders, the verification results, the speedup table (fused, eager and
// torch.compile GPU-time medians with p20-p80 and, beside each, the per-call wall and host
// time of plain calls; speedups on both figures, % of the floor and of a plain copy of the
// same bytes, predicted versus measured fused time, a verdict per case on the figure that
// matches how the model runs, Inputs.Use) and a chart drawn as SVG with no script (SVG,
// embedded inline in the HTML). Speedups and SpeedupsFor are the table's data for other
// renderers. WriteCSV writes the GPU times in Liger-Kernel's benchmark CSV schema.
//
// WritePR writes a folder ready to propose as a pull request (kernels, tests, bench
// script, results, PR.md with the evidence), atomically. CommitToRepo commits such a
// folder to a user's git repository as a new branch without touching the working tree,
// the index or HEAD.
//
// Strings from the inputs (op names, paths, error messages) are data: the Markdown
// renderer quotes them as code spans, the HTML renderer escapes them with html/template
// and the SVG renderer escapes them for XML.
package report
