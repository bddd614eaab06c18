"""Compiling a template's kernels for the H200 (sm_90) on the CPU, without a GPU: the launches a
call really makes, compiled as the GPU would compile them.

For tests only (not copied into generated folders: templates.go embeds the _common files those
carry, one by one). A template test that checks what the compiler makes of its kernels does it in
three steps, in a process without TRITON_INTERPRET (``run_isolated``: under the interpreter
Triton's own ``tl`` helpers are interpreted functions, which do not compile):

- ``capture(kernel_module, call)``: runs ``call()`` with the module's ``_launch`` (every template
  launches through it) replaced by a recorder: the launches, arguments and all, none run. The
  call's tensors may be CPU tensors (``torch.empty``): only their dtypes and alignment matter.
- ``compile_sm90(launch)``: the kernel compiled for sm_90 with Triton's own specialization of the
  captured arguments (``create_function_from_signature`` and ``JITFunction._pack_args``, as
  ``JITFunction.run`` does on the GPU: a pointer's 16-byte alignment, an int's divisibility by 16,
  ``1`` and 32/64-bit width); its ``asm`` holds "ttgir", "ptx" and the rest.
- ``ptxas_usage(ptx)``: (registers, spill bytes) a thread, from Triton's bundled ``ptxas -v``.

Written against Triton 3.6 (``_pack_args`` is Triton's internal API).
"""

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

TARGET = GPUTarget("cuda", 90, 32)  # the H200: compute capability 9.0, warps of 32
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


@dataclasses.dataclass
class Launch:
    """One recorded ``_launch(kernel, grid, args, num_warps, num_stages, **constexprs)``."""

    kernel: object  # the JITFunction
    grid: tuple
    args: tuple
    num_warps: int
    num_stages: int
    constexprs: dict
    fp_fusion: bool = True  # False: compiled without contracting a product and a sum (enable_fp_fusion)

    @property
    def name(self):
        return self.kernel.fn.__name__


def capture(kernel_module, call):
    """The launches ``call()`` makes through ``kernel_module._launch``, recorded instead of run
    (the outputs stay as allocated); the module's ``_launch`` restored afterwards."""
    launches = []

    def record(kernel, grid, args, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
        launches.append(Launch(kernel, tuple(grid), tuple(args), num_warps, num_stages, constexprs, fp_fusion))

    saved = kernel_module._launch
    kernel_module._launch = record
    try:
        call()
    finally:
        kernel_module._launch = saved
    return launches


def compile_sm90(launch):
    """The CompiledKernel of launch for sm_90 (``.asm["ttgir"]``, ``.asm["ptx"]``), specialized on
    its arguments as Triton specializes them on the GPU."""
    backend = make_backend(TARGET)
    k = launch.kernel
    opts = dict(num_warps=launch.num_warps, num_stages=launch.num_stages, debug=False,
                enable_fp_fusion=launch.fp_fusion)
    bound, spec, kw = create_function_from_signature(k.signature, k.params, backend)(
        *launch.args, **launch.constexprs, **opts)
    options, sig, constexprs, attrs = k._pack_args(backend, kw, bound, spec, kw)
    return triton.compile(ASTSource(fn=k, signature=sig, constexprs=constexprs, attrs=attrs), target=TARGET,
                          options=options.__dict__)


def ptxas_usage(ptx):
    """(registers, spill bytes: stores + loads) a thread of the one kernel in ptx, from Triton's
    bundled ``ptxas -v`` for sm_90a (the architecture Triton compiles for on the H200)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", src, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ptxas failed (exit {r.returncode}): {r.stderr[-2000:]}")
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    if regs is None or spills is None:
        raise RuntimeError(f"ptxas -v: no register or spill line in {r.stderr[-2000:]!r}")
    return int(regs.group(1)), int(spills.group(1)) + int(spills.group(2))


# The child of run_isolated(function): loads the function's file as a module (its top-level code
# runs, without TRITON_INTERPRET), calls the function and writes its result as JSON.
_CALL = r"""
import importlib.util, json, sys
path, name, out = sys.argv[1:4]
spec = importlib.util.spec_from_file_location("_sm90_isolated", path)
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
result = getattr(mod, name)()
with open(out, "w") as f:
    json.dump(result, f)
"""


def run_isolated(code_or_function, cwd, timeout=600):
    """Runs Python code (a string: its stdout returned) or a module-level function of a file (the
    file loaded as a module and the function called without arguments: its JSON-able result
    returned) in a new process without TRITON_INTERPRET, in cwd; raises with the end of its stderr
    if it fails, and subprocess.TimeoutExpired past timeout seconds."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if isinstance(code_or_function, str):
        r = subprocess.run([sys.executable, "-c", code_or_function], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=timeout)
        _check(r)
        return r.stdout
    fn = code_or_function
    path = inspect.getsourcefile(fn)
    if fn.__qualname__ != fn.__name__ or not fn.__name__.isidentifier() or path is None:
        raise ValueError(f"run_isolated: {fn.__qualname__} is not a module-level function of a file")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        r = subprocess.run([sys.executable, "-c", _CALL, path, fn.__name__, out], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=timeout)
        _check(r)
        with open(out) as f:
            return json.load(f)


def _check(r):
    if r.returncode != 0:
        raise RuntimeError(f"isolated run failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
