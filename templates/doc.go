// Package templates embeds the Triton kernel templates that fuseadvise instantiates.
//
// Each pattern has a folder <pattern>/ holding kernel.py (the generic, importable Triton
// module), reference.py (the eager PyTorch chain it replaces), adapter.py (the uniform
// test/bench interface) and test_kernel.py (the template's own tests). _common/ holds the
// files every generated folder shares: fa_testing.py, test_generated.py, bench.py and
// pytest.ini. See docs/templates.md.
package templates
