// Package verify checks generated kernel folders (codegen.Write) against their eager PyTorch
// reference, on the CPU in Triton's interpreter (TRITON_INTERPRET=1) or, with Options.GPU,
// compiled on a CUDA device.
//
// The numerical work belongs to a Python runner (runner/runner.py, embedded and written to a
// temporary file at run time) that Run starts with the pinned interpreter (internal/pyenv:
// Options.Python, else $FUSEADVISE_PYTHON, else the venv scripts/setup-python.sh creates) and
// whose torch and triton versions it checks first. Each runner process is long-lived: it
// imports torch once and serves one folder after another, so Options.Jobs processes verify
// folders in parallel. The Go side owns the time limits: a case (or the loading of a folder)
// that prints nothing within Options.Timeout has its process group killed, is reported as
// timed out, and a fresh process goes on with the folder's remaining cases.
//
// For each folder the runner builds its cases from the folder's adapter.py and case.py: the
// traced shapes scaled to interpreter size (adapter.interp_shapes) at every dtype the pattern
// supports; the pattern's adversarial shapes (adapter.adversarial: ragged, primes, a single
// element, one past a block, rows longer than a block) at the traced dtype and in fp32; the
// traced case with its inputs as strided views (activations and vectors separately),
// transposed views and at a storage offset; large and small magnitudes; NaN and -inf
// propagation; fully masked and fully open rows for inputs named "*mask*"; and gradients for
// patterns with a backward. Every trial draws fresh inputs (the seeds are reported); while the
// kernel runs, its outputs and the buffers its wrapper allocates (torch.empty) are NaN-poisoned
// views between guard bands, so unwritten elements and out-of-bounds writes fail; inputs must
// come back unmodified; outputs and gradients are compared in float64 with the adapter's
// per-dtype tolerance, |got-want| <= atol + rtol*|want|, NaN and ±inf required in the same
// places. Interpreter cases larger than Options.MaxElems input elements are refused, not run.
//
// A Runner interface stands between Run and the Python process, so the Go side (protocol,
// time-outs, restarts, rendering) is tested with recorded runner output. Result renders as a
// table (WriteTable, plain or Markdown) or JSON; Result.Failed says whether anything did not
// verify. The mutation suite (mutation_test.go) injects the bugs kernel authors make into
// each template's kernel.py and asserts that Run catches them; docs/verify.md has the cases,
// the tolerances, how to read a failure and the mutation results.
package verify
