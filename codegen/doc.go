// Package codegen instantiates a fused-kernel folder for one fusion opportunity.
//
// A Spec names a pattern (one of Patterns(): the registered patterns whose template folder is
// embedded), the trace's dtype and shapes, and the pattern's parameters, checked against the
// pattern's schema in the registry (patterns.Pattern.Params). SpecsFromReport maps an
// analysis's shape groups to specs through each pattern's entry, WriteFolders writes them.
// Validate checks a spec; Write renders a folder holding the pattern's
// Triton module copied unchanged from the templates, the eager reference, the shared test and
// benchmark scripts, a generated case.py (the validated numbers and enums as Python literals,
// nothing else), manifest.json and README.md. Free-form text from the trace (the Source) goes
// only into manifest.json and README.md, JSON-escaped: never into Python code.
//
// Output is deterministic (the same Spec gives byte-identical files) and written atomically
// (a temporary folder renamed into place). The layout is described in docs/templates.md.
package codegen
