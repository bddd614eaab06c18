package verify

import (
	"fmt"
	"strings"
)

// A mutation is one bug kernel authors make, injected into a template's kernel.py as a
// textual edit: within the function whose definition starts with Func, Old must occur exactly
// once and is replaced by New. When a template changes so that Old no longer matches once, the
// suite fails: update the mutation, do not drop it.
type mutation struct {
	Pattern string
	Name    string // short id, unique per pattern
	Class   string // the kind of bug (see docs/verify.md)
	Func    string // e.g. "def _bias_gelu_fwd(": the function (to the next top-level def/class/decorator) Old must be in
	Old     string
	New     string
}

// apply returns src with m applied, or an error saying why it does not apply exactly once.
func (m mutation) apply(src string) (string, error) {
	start := strings.Index(src, m.Func)
	if start < 0 || strings.Count(src, m.Func) != 1 {
		return "", fmt.Errorf("%s/%s: %q occurs %d times in kernel.py, want 1", m.Pattern, m.Name, m.Func, strings.Count(src, m.Func))
	}
	end := len(src)
	for _, stop := range []string{"\ndef ", "\nclass ", "\n@"} {
		if i := strings.Index(src[start+1:], stop); i >= 0 && start+1+i < end {
			end = start + 1 + i
		}
	}
	body := src[start:end]
	if n := strings.Count(body, m.Old); n != 1 {
		return "", fmt.Errorf("%s/%s: %q occurs %d times in %s...), want 1: the template changed; update the mutation",
			m.Pattern, m.Name, m.Old, n, m.Func)
	}
	return src[:start] + strings.Replace(body, m.Old, m.New, 1) + src[end:], nil
}

// Bug classes.
const (
	classMaskLE    = "mask < becomes <="
	classTailMask  = "dropped tail-block mask"
	classLoadMask  = "dropped load mask in a reduction"
	classBiasIndex = "wrong bias/weight broadcast index"
	classScale     = "missing or wrong scale/constant"
	classEps       = "wrong eps"
	classUpcast    = "no fp32 upcast"
	classStride    = "stride assumed contiguous"
	classRowLoop   = "off-by-one in the row loop / grid"
	classReduce    = "wrong reduction (max/sum swapped, wrong count or axis)"
	classFormula   = "wrong formula (sign, derivative, branch)"
	classIndex32   = "32-bit index arithmetic (offsets past 2**31)"
	classAlias     = "overlapping output accepted, or an input read after it was overwritten"
)

// pointwise2D are the mutations every 2-D tiled pointwise kernel shares (bias_gelu,
// gelu_pyops, dropout_add, swiglu): the 1-D grid of tiles split into row and column blocks,
// 64-bit row and column offsets (killed by the WIDE adversarial cases: offsets past 2**31),
// the grid, and the alias check in the wrapper (killed by the IN_PLACE cases' refusals).
func pointwise2D(pattern, fwd, wrapper, alias string) []mutation {
	return []mutation{
		{pattern, "tiles-floor", classRowLoop, fwd, "tiles_n = tl.cdiv(N, BLOCK_N)", "tiles_n = N // BLOCK_N"},
		{pattern, "tile-split-swapped", classRowLoop, fwd, "(pid // tiles_n).to(tl.int64) * BLOCK_M", "(pid % tiles_n).to(tl.int64) * BLOCK_M"},
		{pattern, "grid-floor", classRowLoop, "def _grid(", "-(-M // BLOCK_M)", "(M // BLOCK_M)"},
		{pattern, "rows-int32", classIndex32, fwd, "(pid // tiles_n).to(tl.int64) * BLOCK_M", "(pid // tiles_n) * BLOCK_M"},
		{pattern, "cols-int32", classIndex32, fwd, "(pid % tiles_n).to(tl.int64) * BLOCK_N", "(pid % tiles_n) * BLOCK_N"},
		{pattern, "overlap-accepted", classAlias, wrapper, alias, "pass"},
		{pattern, "expanded-out-accepted", classAlias, wrapper, "_check_dense(\"" + pattern + "\", [(\"out\", out)])", "pass"},
	}
}

// gelu2D are the mutations of the 2-D tiled GELU kernels (bias_gelu's and gelu_pyops's
// kernels have the same structure; gelu_pyops carries the tanh GELU only). dbias is the bias
// gradient's reduction over rows in def backward( and the same along the wrong axis.
// dbias is the bias gradient's mutation: name, the function it lives in, old, new.
func gelu2D(pattern, fwd, bwd, gradCall string, dbias [4]string) []mutation {
	return []mutation{
		{pattern, "mask-le-n", classMaskLE, fwd, "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		{pattern, "mask-le-m", classMaskLE, fwd, "(rm[:, None] < M)", "(rm[:, None] <= M)"},
		{pattern, "store-unmasked", classTailMask, fwd, "_cast(y, Y.dtype.element_ty), mask=mask)", "_cast(y, Y.dtype.element_ty))"},
		{pattern, "bias-by-row", classBiasIndex, fwd, "b = tl.load(B + rn, mask=rn < N, other=0.0)", "b = tl.load(B + rm, mask=rm < N, other=0.0)"},
		{pattern, "no-upcast", classUpcast, fwd,
			"x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)\n    if HAS_BIAS:\n        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)",
			"x = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)\n    if HAS_BIAS:\n        b = tl.load(B + rn, mask=rn < N, other=0.0)"},
		{pattern, "col-stride-1", classStride, fwd, "rm[:, None] * sxm + rn[None, :] * sxn", "rm[:, None] * sxm + rn[None, :]"},
		{pattern, "row-stride-n", classStride, fwd, "rm[:, None] * sxm + rn[None, :] * sxn", "rm[:, None] * N + rn[None, :] * sxn"},
		{pattern, "bwd-mask-le", classMaskLE, bwd, "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		{pattern, "bwd-no-dy", classFormula, bwd, "dz = dy * " + gradCall, "dz = " + gradCall},
		{pattern, dbias[0], classReduce, dbias[1], dbias[2], dbias[3]},
		{pattern, "half-missing", classScale, "def _gelu(", "0.5 * x * (1.0 + _tanh(inner))", "x * (1.0 + _tanh(inner))"},
		{pattern, "cubic-coef", classScale, "def _gelu(", "0.044715 * x * x * x", "0.044715 * x * x"},
		{pattern, "tanh-sign", classFormula, "def _tanh(", "tl.exp(-2.0 * x)", "tl.exp(2.0 * x)"},
		{pattern, "bwd-dtanh", classFormula, "def _gelu_grad(", "0.5 * x * (1.0 - t * t)", "0.5 * (1.0 - t * t)"},
	}
}

var mutations = func() []mutation {
	var ms []mutation
	fwd, bwd := "def _bias_gelu_fwd(", "def _bias_gelu_bwd("
	ms = append(ms, gelu2D("bias_gelu", fwd, bwd, "_gelu_grad(x, APPROX)",
		[4]string{"dbias-axis", "def backward(", "lead = tuple(range(dzr.dim() - 1))", "lead = tuple(range(1, dzr.dim()))"})...)
	ms = append(ms, pointwise2D("bias_gelu", fwd, "def bias_gelu(",
		`_check_alias("bias_gelu", [("out", out)], [("x", x), ("bias", bias)], in_place=("x",))`)...)
	// the erf GELU; its folder also runs the tanh one (adapter.py: approximate is the caller's)
	ms = append(ms, []mutation{
		{"bias_gelu", "erf-for-tanh", classFormula, "def _gelu(", "if APPROX == 1:", "if APPROX == 0:"},
		{"bias_gelu", "erf-coef", classScale, "def _erf(", "t * (1.421413741 + ", "t * (1.412413741 + "},
		{"bias_gelu", "erf-p", classScale, "def _erf(", "1.0 + 0.3275911 * ax", "1.0 + 0.3257911 * ax"},
		{"bias_gelu", "erf-no-sign", classFormula, "def _erf(", "return tl.where(x < 0, -y, y)", "return y"},
		{"bias_gelu", "erf-t-rsqrt", classFormula, "def _erf(", "t = r * r", "t = r"},
		{"bias_gelu", "erf-exp-abs", classFormula, "def _erf(", "tl.exp(-ax * ax)", "tl.exp(-ax)"},
		{"bias_gelu", "erf-constant", classScale, "def _gelu(", "_erf(x * 0.7071067811865476)", "_erf(x * 0.7978845608028654)"},
		{"bias_gelu", "bwd-erf-constant", classScale, "def _gelu_grad(", "_erf(x * 0.7071067811865476)", "_erf(x * 0.7978845608028654)"},
		{"bias_gelu", "bwd-no-pdf", classFormula, "def _gelu_grad(", "d = cdf + x * pdf", "d = cdf"},
	}...)
	fwd, bwd = "def _new_gelu_fwd(", "def _new_gelu_bwd_tile("
	// the bias gradient: the kernel's partial sums added up by _sum_parts, BLOCK_G groups at a
	// time (under the interpreter two blocks of groups whatever their count)
	ms = append(ms, gelu2D("gelu_pyops", fwd, bwd, "_gelu_grad(x)",
		[4]string{"dbias-groups-skipped", "def _sum_parts(", "g += BLOCK_G", "g += 2 * BLOCK_G"})...)
	// the bias gradient's partial sums in the backward kernel (the grad cases with several
	// groups of row tiles: the first adversarial shape, 129 rows)
	ms = append(ms, []mutation{
		{"gelu_pyops", "dbias-group-overwrite", classStride, "def _new_gelu_bwd(", "tl.store(PART + g * N + rn, tl.sum(acc", "tl.store(PART + rn, tl.sum(acc"},
		{"gelu_pyops", "dbias-last-tile-dropped", classRowLoop, "def _new_gelu_bwd(", "while r < end:", "while r < end - BLOCK_M:"},
	}...)
	ms = append(ms, pointwise2D("gelu_pyops", fwd, "def new_gelu(",
		`_check_alias("gelu_pyops", [("out", out)], [("x", x), ("bias", bias)], in_place=("x",))`)...)

	fwd, bwd = "def _dropout_add_fwd(", "def _dropout_add_bwd("
	ms = append(ms, pointwise2D("dropout_add", fwd, "def dropout_add(",
		"_check_alias(\"dropout_add\", [(\"out\", out)], [(\"x\", x), (\"residual\", residual), (\"bias\", bias)],\n                     in_place=(\"x\", \"residual\"))")...)
	ms = append(ms, []mutation{
		{"dropout_add", "mask-le-n", classMaskLE, fwd, "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		{"dropout_add", "store-unmasked", classTailMask, fwd, "_cast(r + z, Y.dtype.element_ty), mask=mask)", "_cast(r + z, Y.dtype.element_ty))"},
		{"dropout_add", "bias-by-row", classBiasIndex, fwd, "b = tl.load(B + rn, mask=rn < N, other=0.0)", "b = tl.load(B + rm, mask=rm < N, other=0.0)"},
		{"dropout_add", "no-rescale", classScale, fwd, "tl.where(keep, scale, 0.0)", "tl.where(keep, 1.0, 0.0)"},
		{"dropout_add", "keep-inverted", classFormula, "def _keep(", "return u.to(tl.float32) >= p * 65536.0", "return u.to(tl.float32) < p * 65536.0"},
		// a mask that depends on the tiles (dropout_mask tiles differently from the kernel)
		{"dropout_add", "keep-by-tile", classFormula, "def _keep(", "g = col0 // 8 + tl.arange(0, BLOCK_N // 8)", "g = tl.arange(0, BLOCK_N // 8)"},
		{"dropout_add", "no-upcast", classUpcast, fwd,
			"z = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)\n    if HAS_BIAS:\n        b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)",
			"z = tl.load(X + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)\n    if HAS_BIAS:\n        b = tl.load(B + rn, mask=rn < N, other=0.0)"},
		{"dropout_add", "residual-col-stride-1", classStride, fwd, "rm[:, None] * srm + rn[None, :] * srn", "rm[:, None] * srm + rn[None, :]"},
		{"dropout_add", "x-row-stride-n", classStride, fwd, "rm[:, None] * sxm + rn[None, :] * sxn", "rm[:, None] * N + rn[None, :] * sxn"},
		{"dropout_add", "bwd-no-rescale", classScale, "def _dropout_add_bwd_tile(", "BLOCK_N), scale, 0.0)", "BLOCK_N), 1.0, 0.0)"},
		{"dropout_add", "bwd-mask-le", classMaskLE, "def _dropout_add_bwd_tile(", "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		// the bias gradient's partial sums in the backward kernel
		{"dropout_add", "dbias-groups-skipped", classReduce, "def _sum_parts(", "g += BLOCK_G", "g += 2 * BLOCK_G"},
		{"dropout_add", "dbias-group-overwrite", classStride, bwd, "tl.store(PART + g * N + rn, tl.sum(acc", "tl.store(PART + rn, tl.sum(acc"},
		{"dropout_add", "dbias-last-tile-dropped", classRowLoop, bwd, "while r < end:", "while r < end - BLOCK_M:"},
	}...)

	fwd, bwd = "def _swiglu_fwd(", "def _swiglu_bwd("
	ms = append(ms, pointwise2D("swiglu", fwd, "def swiglu(",
		`_check_alias("swiglu", [("out", out)], ins, in_place=("gate", "up"))`)...)
	ms = append(ms, []mutation{
		{"swiglu", "mask-le-n", classMaskLE, fwd, "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		{"swiglu", "mask-le-m", classMaskLE, fwd, "(rm[:, None] < M)", "(rm[:, None] <= M)"},
		{"swiglu", "store-unmasked", classTailMask, fwd, "_cast(s * u, Y.dtype.element_ty), mask=mask)", "_cast(s * u, Y.dtype.element_ty))"},
		{"swiglu", "no-upcast", classUpcast, fwd,
			"g = tl.load(G + rm[:, None] * sgm + rn[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)",
			"g = tl.load(G + rm[:, None] * sgm + rn[None, :] * sgn, mask=mask, other=0.0)"},
		{"swiglu", "silu-sign", classFormula, fwd, "g / (1.0 + tl.exp(-g))", "g / (1.0 + tl.exp(g))"},
		{"swiglu", "up-col-stride-1", classStride, fwd, "rm[:, None] * sum_ + rn[None, :] * sun", "rm[:, None] * sum_ + rn[None, :]"},
		{"swiglu", "up-row-stride-n", classStride, fwd, "rm[:, None] * sum_ + rn[None, :] * sun", "rm[:, None] * N + rn[None, :] * sun"},
		{"swiglu", "bwd-dsilu", classFormula, bwd, "(1.0 + g * (1.0 - sig))", "(1.0 + g * sig)"},
		{"swiglu", "bwd-du", classFormula, bwd, "du = dy * silu", "du = silu"},
		{"swiglu", "bwd-mask-le", classMaskLE, bwd, "(rn[None, :] < N)", "(rn[None, :] <= N)"},
		// in place on one half of a chunked projection: the halves interleave without overlapping
		{"swiglu", "disjoint-always", classAlias, "def _disjoint(", "return all(not (abs(k) < M and abs(-d - k * sm) < N) for k in (q, q + 1))", "return True"},
		{"swiglu", "disjoint-off-by-one", classAlias, "def _disjoint(", "abs(-d - k * sm) < N)", "abs(-d - k * sm) <= N)"},
	}...)

	fwd, bwd = "def _rmsnorm_fwd(", "def _rmsnorm_bwd_dx("
	ms = append(ms, []mutation{
		// the single-block path (rows up to one block: 129x127, 31x37, ...)
		// the weight gradient's partial sums of row groups
		{"rmsnorm_pyops", "dw-last-row-dropped", classRowLoop, "def _rmsnorm_bwd_dw(", "end = tl.minimum(r + rows, M)", "end = tl.minimum(r + rows, M) - 1"},
		{"rmsnorm_pyops", "dw-group-overwrite", classStride, "def _rmsnorm_bwd_dw(", "tl.store(PART + g.to(tl.int64) * N + cols", "tl.store(PART + cols"},
		{"rmsnorm_pyops", "dw-col-stride-1", classStride, "def _rmsnorm_bwd_dw(", "X + r * sxm + cols * sxn", "X + r * sxm + cols"},
		{"rmsnorm_pyops", "dw-rstd-dropped", classScale, "def _rmsnorm_bwd_dw(", "acc += dy * (x * tl.load(RSTD + r))", "acc += dy * x"},
		{"rmsnorm_pyops", "single-mask-le", classMaskLE, fwd, "m = cols < N\n        x = tl.load(", "m = cols <= N\n        x = tl.load("},
		{"rmsnorm_pyops", "single-store-unmasked", classTailMask, fwd, "_cast(n * w, Y.dtype.element_ty), mask=m)\n    else:", "_cast(n * w, Y.dtype.element_ty))\n    else:"},
		{"rmsnorm_pyops", "single-eps-dropped", classEps, fwd, "tl.sum(x * x, axis=0) / N + eps)", "tl.sum(x * x, axis=0) / N)"},
		{"rmsnorm_pyops", "single-sum-as-max", classReduce, fwd, "tl.sum(x * x, axis=0) / N + eps)", "tl.max(x * x, axis=0) / N + eps)"},
		{"rmsnorm_pyops", "single-no-upcast", classUpcast, fwd, "x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)\n        rstd", "x = tl.load(X + cols * sxn, mask=m, other=0.0)\n        rstd"},
		{"rmsnorm_pyops", "single-col-stride-1", classStride, fwd, "x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)\n        rstd", "x = tl.load(X + cols, mask=m, other=0.0).to(tl.float32)\n        rstd"},
		{"rmsnorm_pyops", "single-cols-int32", classIndex32, fwd, "cols = tl.arange(0, BLOCK_N).to(tl.int64)", "cols = tl.arange(0, BLOCK_N)"},
		// the chunked path (rows longer than a block: the traced 300, 1500)
		{"rmsnorm_pyops", "sum-mask-le", classMaskLE, fwd, "mask=cols < N, other=0.0).to(tl.float32)\n            acc += x * x", "mask=cols <= N, other=0.0).to(tl.float32)\n            acc += x * x"},
		{"rmsnorm_pyops", "sum-unmasked", classLoadMask, fwd, "x = tl.load(X + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)\n            acc += x * x", "x = tl.load(X + cols * sxn).to(tl.float32)\n            acc += x * x"},
		{"rmsnorm_pyops", "eps-outside-sqrt", classEps, fwd, "1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)", "1.0 / (tl.sqrt(tl.sum(acc, axis=0) / N) + eps)"},
		{"rmsnorm_pyops", "eps-hardcoded", classEps, "def rms_norm(", "float(eps)),", "1e-5),"},
		{"rmsnorm_pyops", "chunked-cols-int32", classIndex32, fwd, "offs = tl.arange(0, BLOCK_N).to(tl.int64)", "offs = tl.arange(0, BLOCK_N)"},
		{"rmsnorm_pyops", "mean-n-minus-1", classReduce, fwd, "tl.sum(acc, axis=0) / N + eps", "tl.sum(acc, axis=0) / (N - 1) + eps"},
		{"rmsnorm_pyops", "sum-as-max", classReduce, fwd, "tl.sum(acc, axis=0) / N + eps", "tl.max(acc, axis=0) / N + eps"},
		{"rmsnorm_pyops", "last-chunk-dropped", classRowLoop, fwd, "while start < N:  #", "while start < N - BLOCK_N:  #"},
		{"rmsnorm_pyops", "second-loop-short", classRowLoop, fwd, "        start = 0\n        while start < N:\n", "        start = 0\n        while start < N - 1:\n"},
		{"rmsnorm_pyops", "weight-chunk-index", classBiasIndex, fwd, "            w = tl.load(W + cols, mask=m, other=0.0)", "            w = tl.load(W + cols - start, mask=m, other=0.0)"},
		{"rmsnorm_pyops", "no-upcast", classUpcast, fwd, "x = tl.load(X + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)\n            acc += x * x", "x = tl.load(X + cols * sxn, mask=cols < N, other=0.0)\n            acc += x * x"},
		{"rmsnorm_pyops", "col-stride-1", classStride, fwd, "x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)\n            w", "x = tl.load(X + cols, mask=m, other=0.0).to(tl.float32)\n            w"},
		{"rmsnorm_pyops", "row-stride-n", classStride, fwd, "X += row * sxm", "X += row * N"},
		{"rmsnorm_pyops", "bwd-mean-count", classReduce, bwd, "c = tl.sum(acc, axis=0) / N", "c = tl.sum(acc, axis=0) / (N + 1)"},
		{"rmsnorm_pyops", "bwd-no-projection", classFormula, bwd, "dx = rstd * (dn - x * rstd * c)", "dx = rstd * dn"},
		{"rmsnorm_pyops", "rstd-not-stored", classFormula, "def rms_norm(", "STATS=rstd is not None", "STATS=False"},
		// the one-pass backward of rows that fit a block (the grad cases of the first adversarial
		// shape, 129 rows of 127 in 8 groups of row tiles, and adapter.grad_shapes' 37 rows of 70)
		{"rmsnorm_pyops", "bwd1-mean-over-block", classReduce, "def _rmsnorm_bwd_tile(", "axis=1) / N", "axis=1) / BLOCK_N"},
		{"rmsnorm_pyops", "bwd1-no-projection", classFormula, "def _rmsnorm_bwd_tile(", "dx = rstd[:, None] * (dn - n * c[:, None])", "dx = rstd[:, None] * dn"},
		{"rmsnorm_pyops", "bwd1-rstd-dropped", classScale, "def _rmsnorm_bwd_tile(", "n = x * rstd[:, None]", "n = x"},
		{"rmsnorm_pyops", "bwd1-group-overwrite", classStride, "def _rmsnorm_bwd(", "tl.store(PART + g * N + cols, acc", "tl.store(PART + cols, acc"},
		{"rmsnorm_pyops", "bwd1-last-tile-dropped", classRowLoop, "def _rmsnorm_bwd(", "while r < end:", "while r < end - BLOCK_M:"},
		// in place (out=x) and the refusals (the IN_PLACE adversarial cases)
		{"rmsnorm_pyops", "overlap-accepted", classAlias, "def rms_norm(",
			"_check_alias(\"rmsnorm\", [(\"out\", out), (\"rstd\", rstd)], [(\"x\", x), (\"weight\", weight)], in_place=(\"x\",))",
			"pass"},
		{"rmsnorm_pyops", "expanded-out-accepted", classAlias, "def rms_norm(", "_check_dense(\"rmsnorm\", [(\"out\", out)])", "pass"},
	}...)

	fwd, cf := "def _add_layernorm_fwd(", "def _add_layernorm_cf_fwd("
	ms = append(ms, []mutation{
		{"add_layernorm", "mask-le", classMaskLE, "def _sum_chunk(", "m = cols < N", "m = cols <= N"},
		{"add_layernorm", "sum-store-unmasked", classTailMask, "def _sum_chunk(", "tl.store(S + cols * ssn, s, mask=m)", "tl.store(S + cols * ssn, s)"},
		{"add_layernorm", "single-var-unmasked", classLoadMask, fwd, "d = tl.where(m, s - mean, 0.0)", "d = s - mean"},
		{"add_layernorm", "chunked-var-unmasked", classLoadMask, fwd, "d = tl.where(cols < N, s - mean, 0.0)", "d = s - mean"},
		{"add_layernorm", "mean-over-block", classReduce, fwd, "mean = tl.sum(s, axis=0) / N", "mean = tl.sum(s, axis=0) / BLOCK_N"},
		{"add_layernorm", "mean-as-max", classReduce, fwd, "mean = tl.sum(acc, axis=0) / N", "mean = tl.max(acc, axis=0)"},
		{"add_layernorm", "eps-dropped", classEps, fwd, "tl.sum(d * d, axis=0) / N + eps)", "tl.sum(d * d, axis=0) / N)"},
		{"add_layernorm", "eps-hardcoded", classEps, "def add_layer_norm(", "float(eps)),", "1e-6),"},
		{"add_layernorm", "last-chunk-dropped", classRowLoop, fwd, "while start < N:\n            acc += _sum_chunk(", "while start < N - BLOCK_N:\n            acc += _sum_chunk("},
		{"add_layernorm", "weight-chunk-index", classBiasIndex, fwd, "                y = y * tl.load(W + cols, mask=m", "                y = y * tl.load(W + cols - start, mask=m"},
		{"add_layernorm", "no-upcast", classUpcast, "def _sum_chunk(",
			"x = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32)\n    r = tl.load(R + cols * srn, mask=m, other=0.0).to(tl.float32)",
			"x = tl.load(X + cols * sxn, mask=m, other=0.0)\n    r = tl.load(R + cols * srn, mask=m, other=0.0)"},
		{"add_layernorm", "residual-col-stride-1", classStride, "def _sum_chunk(", "tl.load(R + cols * srn,", "tl.load(R + cols,"},
		{"add_layernorm", "residual-row-stride-n", classStride, fwd, "R += (tl.program_id(0) % RR).to(tl.int64) * srm", "R += (tl.program_id(0) % RR).to(tl.int64) * N"},
		{"add_layernorm", "rstd-not-inverted", classFormula, fwd, "y = d * rstd", "y = d / rstd"},
		{"add_layernorm", "stats-not-stored", classFormula, "def add_layer_norm(", "STATS=stats,", "STATS=False,"},
		{"add_layernorm", "residual-rows-1", classBiasIndex, "def _residual_rows(", "return x.numel() // x.shape[-1] if x.shape[-1] else 0", "return 1"},
		// offsets past 2**31 (the FAR adversarial cases: rows of 100 single-block, 299 chunked)
		{"add_layernorm", "single-cols-int32", classIndex32, fwd, "cols = tl.arange(0, BLOCK_N).to(tl.int64)", "cols = tl.arange(0, BLOCK_N)"},
		{"add_layernorm", "chunked-cols-int32", classIndex32, fwd, "offs = tl.arange(0, BLOCK_N).to(tl.int64)", "offs = tl.arange(0, BLOCK_N)"},
		// in place and the refusals (the IN_PLACE adversarial cases: s over x, s over the residual)
		{"add_layernorm", "chunked-rereads-inputs", classAlias, fwd,
			"s = tl.load(S + cols * ssn, mask=m, other=0.0).to(tl.float32)\n            y = (s - mean) * rstd",
			"s = tl.load(X + cols * sxn, mask=m, other=0.0).to(tl.float32) + tl.load(R + cols * srn, mask=m, other=0.0).to(tl.float32)\n            y = (s - mean) * rstd"},
		{"add_layernorm", "s-overlap-accepted", classAlias, "def add_layer_norm(",
			"_check_alias(\"add_layernorm\", [(\"s\", s)], ins, in_place=(\"x\", \"residual\"))", "pass"},
		{"add_layernorm", "y-over-sum-accepted", classAlias, "def add_layer_norm(",
			"_check_alias(\"add_layernorm\", [(\"y\", y)], ins + [(\"s\", s)])",
			"_check_alias(\"add_layernorm\", [(\"y\", y)], ins, in_place=(\"x\", \"residual\"))"},
		{"add_layernorm", "expanded-out-accepted", classAlias, "def add_layer_norm(", "_check_dense(\"add_layernorm\", [(\"s\", s), (\"y\", y)])", "pass"},
		// the one-pass backward of rows that fit a block (the grad case of the first adversarial
		// shape, 129 rows of 127 in 8 groups of row tiles)
		{"add_layernorm", "bwd-no-xhat-term", classFormula, "def _add_layernorm_bwd_tile(", "d = (wdy - (xhat * c1[:, None] + c2[:, None]))", "d = (wdy - c2[:, None])"},
		{"add_layernorm", "bwd-no-mean-term", classFormula, "def _add_layernorm_bwd_tile(", "d = (wdy - (xhat * c1[:, None] + c2[:, None]))", "d = (wdy - xhat * c1[:, None])"},
		{"add_layernorm", "bwd-ds-dropped", classFormula, "def _fused_backward(", "HAS_DS=has_ds,", "HAS_DS=False,"},
		{"add_layernorm", "bwd-group-overwrite", classStride, "def _add_layernorm_bwd(", "tl.store(PART + PARTS * g * N + cols, dw", "tl.store(PART + cols, dw"},
		{"add_layernorm", "bwd-last-tile-dropped", classRowLoop, "def _add_layernorm_bwd(", "while r < end:", "while r < end - BLOCK_M:"},
		{"add_layernorm", "bwd-dbias-as-dweight", classFormula, "def _add_layernorm_bwd_tile(", "db += tl.sum(dy, axis=0)", "db += tl.sum(dy * xhat, axis=0)"},
		// the channels-first forward on NCHW inputs read in place (the NCHW_VIEWS adversarial
		// cases: 15 positions of 7 channels in tiles of 4, 9 of 129 in tiles of 2; their gradient)
		{"add_layernorm", "cf-position-mask-dropped", classTailMask, cf, "m = cm[:, None] & (p < P)[None, :]", "m = tl.broadcast_to(cm[:, None], (BLOCK_N, BLOCK_P))"},
		{"add_layernorm", "cf-var-unmasked", classLoadMask, cf, "d = tl.where(m, sf - mean[None, :], 0.0)", "d = sf - mean[None, :]"},
		{"add_layernorm", "cf-mean-over-block", classReduce, cf, "tl.sum(tl.where(m, sf - s0[None, :], 0.0), axis=0) / N", "tl.sum(tl.where(m, sf - s0[None, :], 0.0), axis=0) / BLOCK_N"},
		{"add_layernorm", "cf-channel-stride-1", classStride, cf, "c[:, None] * sxn", "c[:, None]"},
		{"add_layernorm", "cf-stats-row", classRowLoop, cf, "row = b * P + p", "row = b * BLOCK_P + p"},
		// a vector residual (the stem convolution's bias, the add_layernorm+stem folder): read
		// with zero strides, its gradient a third partial sum of the one-pass backward
		{"add_layernorm", "cf-vector-residual-strided", classBiasIndex, "def _batch_layout(", "tail = [0, 0, residual.stride(-1)] if vector else []", "tail = [0, 1, residual.stride(-1)] if vector else []"},
		{"add_layernorm", "bwd-vector-residual-sums-dy", classFormula, "def _add_layernorm_bwd_tile(", "drs += tl.sum(d, axis=0)", "drs += tl.sum(dy, axis=0)"},
	}...)

	rows, long := "def _mask_softmax_rows(", "def _mask_softmax_long("
	dropBwd := "def _softmax_dropout_bwd("
	ms = append(ms, []mutation{
		// the dropout backward (p > 0; every folder's grad cases run it through the other p)
		{"mask_softmax", "dropbwd-rowsum-unmasked", classFormula, dropBwd, "acc += dp * prob", "acc += dy * prob"},
		{"mask_softmax", "dropbwd-mask-ignored", classFormula, dropBwd, "ds = prob * (dp - dot)", "ds = prob * (dy - dot)"},
		{"mask_softmax", "dropbwd-rowsum-dropped", classFormula, dropBwd, "ds = prob * (dp - dot)", "ds = prob * dp"},
		{"mask_softmax", "dropbwd-rowsum-max", classReduce, dropBwd, "dot = tl.sum(acc, axis=1)[:, None]", "dot = tl.max(acc, axis=1)[:, None]"},
		{"mask_softmax", "dropbwd-no-scale", classScale, dropBwd, "_cast(ds * scale, DX.dtype.element_ty)", "_cast(ds, DX.dtype.element_ty)"},
		{"mask_softmax", "dropbwd-fill-not-zeroed", classFormula, dropBwd, "ds = tl.where(mk, 0.0, ds)", "ds = ds"},
		{"mask_softmax", "dropbwd-rows-le", classTailMask, dropBwd, "live = row < R", "live = row <= R"},
		{"mask_softmax", "rows-mask-le", classMaskLE, rows, "inb = (row < R)[:, None] & (cols < N)", "inb = (row < R)[:, None] & (cols <= N)"},
		{"mask_softmax", "rows-tail-rows", classTailMask, rows, "inb = (row < R)[:, None] & (cols < N)", "inb = cols < N"},
		{"mask_softmax", "long-store-unmasked", classTailMask, long,
			"tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty), mask=cols < N)",
			"tl.store(Y + cols * syn, _cast(y, Y.dtype.element_ty))"},
		{"mask_softmax", "max-as-sum", classReduce, rows, "mx = tl.max(s, axis=1)", "mx = tl.sum(s, axis=1)"},
		{"mask_softmax", "online-max-as-sum", classReduce, long, "m_new = tl.maximum(m_run, s)", "m_new = m_run + s"},
		{"mask_softmax", "sum-as-max", classReduce, rows, "y = e / tl.sum(e, axis=1)[:, None]", "y = e / tl.max(e, axis=1)[:, None]"},
		{"mask_softmax", "sum-wrong-axis", classReduce, rows, "y = e / tl.sum(e, axis=1)[:, None]", "y = e / tl.sum(e, axis=0)[None, :]"},
		{"mask_softmax", "no-rescale-running-sum", classFormula, long, "l_run = l_run * tl.exp(m_run - safe) + tl.exp(s - safe)", "l_run = l_run + tl.exp(s - safe)"},
		{"mask_softmax", "missing-scale", classScale, "def _scores(", "s = _cast(s * scale, xp.dtype.element_ty)", "s = _cast(s, xp.dtype.element_ty)"},
		{"mask_softmax", "mask-inverted", classFormula, "def _scores(", "s = tl.where(mk, fill, s)", "s = tl.where(mk, s, fill)"},
		{"mask_softmax", "mask-row-full", classBiasIndex, rows, "mp = MASK + (b * smb + h * smh + qrow * smm)[:, None]", "mp = MASK + (b * smb + h * smh + qrow * N)[:, None]"},
		{"mask_softmax", "no-upcast", classUpcast, "def _scores(", "s = tl.load(xp + cols * sxn, mask=inb, other=0.0).to(tl.float32)", "s = tl.load(xp + cols * sxn, mask=inb, other=0.0)"},
		{"mask_softmax", "col-stride-1", classStride, "def _scores(", "tl.load(xp + cols * sxn,", "tl.load(xp + cols,"},
		{"mask_softmax", "row-stride-n", classStride, rows, "xp = X + (b * sxb + h * sxh + qrow * sxm)[:, None]", "xp = X + (b * sxb + h * sxh + qrow * N)[:, None]"},
		{"mask_softmax", "long-row-stride-n", classStride, long, "X += b * sxb + h * sxh + qrow * sxm", "X += b * sxb + h * sxh + qrow * N"},
		{"mask_softmax", "last-chunk-dropped", classRowLoop, long,
			"l_run = tl.full([BLOCK_N], 0, tl.float32)\n    start = 0\n    while start < N:",
			"l_run = tl.full([BLOCK_N], 0, tl.float32)\n    start = 0\n    while start < N - BLOCK_N:"},
		{"mask_softmax", "fp32-out-rounded", classUpcast, rows, "tl.store(yp + cols * syn, _cast(y, Y.dtype.element_ty), mask=inb)", "tl.store(yp + cols * syn, _cast(_cast(y, X.dtype.element_ty).to(tl.float32), Y.dtype.element_ty), mask=inb)"},
		{"mask_softmax", "bwd-missing-scale", classScale, "def backward(", "g = g * ctx.scale", "g = g"},
		{"mask_softmax", "mask-broadcast-stride", classBiasIndex, "def _broadcast_strides(", "        elif n != 1:\n            return None", "        else:\n            out[pad + i] = st"},
		// offsets past 2**31 (the FAR adversarial cases: rows of 100 in tiles, 299 chunked)
		{"mask_softmax", "rows-cols-int32", classIndex32, rows, "cols = tl.arange(0, BLOCK_N).to(tl.int64)[None, :]", "cols = tl.arange(0, BLOCK_N)[None, :]"},
		{"mask_softmax", "long-cols-int32", classIndex32, long, "offs = tl.arange(0, BLOCK_N).to(tl.int64)", "offs = tl.arange(0, BLOCK_N)"},
		// in place (out=x) and the refusals (the IN_PLACE adversarial cases, in fp32)
		{"mask_softmax", "overlap-accepted", classAlias, "def _mask_softmax(",
			"_check_alias(\"mask_softmax\", [(\"out\", out)], [(\"x\", x), (\"mask\", mask)], in_place=(\"x\",))", "pass"},
		{"mask_softmax", "expanded-out-accepted", classAlias, "def _mask_softmax(", "_check_dense(\"mask_softmax\", [(\"out\", out)])", "pass"},
	}...)

	// linear_gelu: the pointer GEMM (fp32, strided or unaligned operands), the TMA GEMM (aligned
	// fp16/bf16), their epilogue with both GELUs (every folder checks both: the adapter's test
	// mode), the 64-bit offsets (the adapter's FAR case) and the refused outputs (ALIAS)
	index32 := "32-bit index math (int64 dropped)"
	overlap := "overlapping output not refused"
	fwd = "def _linear_gelu_kernel("
	ms = append(ms, []mutation{
		{"linear_gelu", "k-mask-le", classMaskLE, fwd, "kmask = (k0 + rk) < K", "kmask = (k0 + rk) <= K"},
		{"linear_gelu", "store-unmasked", classTailMask, fwd, "z, mask=mask)", "z)"},
		{"linear_gelu", "bias-by-row", classBiasIndex, "def _epilogue(", "tl.load(BIAS + rn, mask=rn < N,", "tl.load(BIAS + rn * 0, mask=rn < N,"},
		{"linear_gelu", "half-missing", classScale, "def _gelu(", "y = 0.5 * x * (1.0 + _erf(", "y = x * (1.0 + _erf("},
		{"linear_gelu", "erf-constant", classScale, "def _gelu(", "_erf(x * 0.7071067811865476)", "_erf(x * 0.7978845608028654)"},
		{"linear_gelu", "erf-coefficient", classFormula, "def _erf(", "t * 1.061405429", "t * 1.07"},
		{"linear_gelu", "erf-sign-dropped", classFormula, "def _erf(", "return tl.where(x < 0, -y, y)", "return y"},
		{"linear_gelu", "tanh-half-missing", classScale, "def _gelu(", "y = 0.5 * x * (1.0 + (2.0 /", "y = x * (1.0 + (2.0 /"},
		{"linear_gelu", "tanh-cubic-coef", classScale, "def _gelu(", "0.044715 * x * x * x", "0.044715 * x * x"},
		{"linear_gelu", "tanh-constant", classScale, "def _gelu(", "inner = 0.7978845608028654 *", "inner = 0.7071067811865476 *"},
		{"linear_gelu", "tanh-sign", classFormula, "def _gelu(", "tl.exp(-2.0 * inner)", "tl.exp(2.0 * inner)"},
		{"linear_gelu", "gelu-branch-swapped", classFormula, "def _gelu(", "if APPROX == 1:", "if APPROX == 0:"},
		{"linear_gelu", "bf16-dot", classUpcast, fwd, "tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=_F32_DOT)", "tl.dot(a, b, acc, input_precision=_F32_DOT)"},
		{"linear_gelu", "a-col-stride-1", classStride, fwd, "rk64[None, :] * sak", "rk64[None, :]"},
		{"linear_gelu", "w-row-stride-k", classStride, fwd, "rb[None, :] * swn", "rb[None, :] * K"},
		{"linear_gelu", "a-advance-1", classStride, fwd, "a_ptr += a_step", "a_ptr += BLOCK_K"},
		{"linear_gelu", "last-k-block-dropped", classRowLoop, fwd, "for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K, BLOCK_K):"},
		{"linear_gelu", "group-overflow", classRowLoop, "def _tile(", "group_m = tl.minimum(num_m - first_m, GROUP_M)", "group_m = GROUP_M"},
		{"linear_gelu", "tma-w-tile-at-m", classStride, "def _linear_gelu_tma_kernel(", "w = w_desc.load([off_n, k0])", "w = w_desc.load([off_m, k0])"},
		{"linear_gelu", "tma-bf16-dot", classUpcast, "def _linear_gelu_tma_kernel(", "tl.dot(a.to(tl.float32), w.to(tl.float32).T, acc, input_precision=_F32_DOT)", "tl.dot(a, w.T, acc, input_precision=_F32_DOT)"},
		{"linear_gelu", "tma-last-k-block-dropped", classRowLoop, "def _linear_gelu_tma_kernel(", "for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K, BLOCK_K):"},
		{"linear_gelu", "a-row-int32", index32, fwd, "ra = (rm % M).to(tl.int64)", "ra = rm % M"},
		{"linear_gelu", "a-col-int32", index32, fwd, "rk64[None, :] * sak", "rk[None, :] * sak"},
		{"linear_gelu", "a-step-int32", index32, fwd, "a_step = BLOCK_K * tl.cast(sak, tl.int64)", "a_step = BLOCK_K * sak"},
		{"linear_gelu", "y-row-int32", index32, fwd, "rm.to(tl.int64)[:, None] * sym", "rm[:, None] * sym"},
		{"linear_gelu", "y-col-int32", index32, fwd, "rn.to(tl.int64)[None, :] * syn", "rn[None, :] * syn"},
		// training: the pre-activation the forward stores, the GELU derivative of the backward
		{"linear_gelu", "pre-not-saved", classFormula, fwd, "        tl.store(P + offs, pre, mask=mask)", "        pass"},
		{"linear_gelu", "pre-is-output", classFormula, fwd, "tl.store(P + offs, pre, mask=mask)", "tl.store(P + offs, z, mask=mask)"},
		{"linear_gelu", "tma-pre-not-saved", classFormula, "def _linear_gelu_tma_kernel(", "        p_desc.store([off_m, off_n], pre)", "        pass"},
		{"linear_gelu", "dgelu-pdf-dropped", classFormula, "def _gelu_grad(",
			" + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)", ""},
		{"linear_gelu", "dgelu-tanh-inner-derivative", classScale, "def _gelu_grad(", "(1.0 + 0.134145 * z * z)", "(1.0 + 0.044715 * z * z)"},
		{"linear_gelu", "dgelu-tanh-sech2", classFormula, "def _gelu_grad(", "(1.0 - t * t)", "(1.0 - t)"},
		{"linear_gelu", "dgelu-mask-le", classMaskLE, "def _gelu_bwd_tile(", "mask = (rm[:, None] < M)", "mask = (rm[:, None] <= M)"},
		{"linear_gelu", "dgelu-store-unmasked", classTailMask, "def _gelu_bwd_tile(",
			"tl.store(DZ + rm[:, None] * sdzm + rn[None, :], dz, mask=mask)", "tl.store(DZ + rm[:, None] * sdzm + rn[None, :], dz)"},
		{"linear_gelu", "dbias-group-overwrite", classStride, "def _gelu_bwd_kernel(", "tl.store(PART + g * N + rn, tl.sum(acc", "tl.store(PART + rn, tl.sum(acc"},
		{"linear_gelu", "dbias-last-tile-dropped", classRowLoop, "def _gelu_bwd_kernel(", "while r < end:", "while r < end - BLOCK_M:"},
		// the library path (cuBLAS, then the GELU pass): the interpreter takes it in every
		// other bucket of M
		{"linear_gelu", "lib-mask-le", classMaskLE, "def _gelu_fwd_kernel(", "mask = (rm[:, None] < M)", "mask = (rm[:, None] <= M)"},
		{"linear_gelu", "lib-store-unmasked", classTailMask, "def _gelu_fwd_kernel(",
			"Y.dtype.element_ty), mask=mask)", "Y.dtype.element_ty))"},
		{"linear_gelu", "lib-row-stride", classStride, "def _gelu_fwd_kernel(", "offs = rm[:, None] * N + rn[None, :]", "offs = rm[:, None] * BLOCK_N + rn[None, :]"},
		{"linear_gelu", "lib-bias-dropped", classBiasIndex, "def _linear_gelu(",
			"torch.addmm(bias, a2, weight.t(), out=dst.view(M, N))", "torch.mm(a2, weight.t(), out=dst.view(M, N))"},
		{"linear_gelu", "lib-pre-not-saved", classFormula, "def _linear_gelu(", "dst = p if save else y", "dst = y"},
		{"linear_gelu", "out-overlap-unchecked", overlap, "def _linear_gelu(",
			`_check_alias("linear_gelu", [("out", out)], [("x", x), ("weight", weight), ("bias", bias)])`, "pass"},
		{"linear_gelu", "out-overlap-x-unchecked", overlap, "def _linear_gelu(",
			`[("out", out)], [("x", x), ("weight", weight),`, `[("out", out)], [("weight", weight),`},
	}...)

	// layernorm_linear: row statistics (several rows per program, shifted by the first
	// element, the zero-variance guard), the pointer GEMM in both variants (fold: unaligned or
	// fp32 operands; normalize on load: every folder checks it too, the adapter's test mode),
	// the TMA GEMM (aligned fp16/bf16), the fold's epilogue, the 64-bit offsets (FAR), the
	// refused outputs (ALIAS) and constant rows through shared statistics (CONSTANT)
	stats := "def _row_stats(" // the rows' statistics: the statistics kernel's and the one-launch GEMM's
	statsKernel := "def _ln_stats_kernel("
	shifted := "def _shifted("
	fwd = "def _ln_linear_kernel("
	tma := "def _fold_tma_kernel("
	epi := "def _fold_epilogue("
	bwd = "def _ln_bwd_kernel("
	bwdTile := "def _ln_bwd_tile(" // the kernel's work on one tile of rows
	fold := "def _fold_kernel("
	ms = append(ms, []mutation{
		{"layernorm_linear", "stats-mask-le", classMaskLE, shifted, "(cols < K)[None, :]", "(cols <= K)[None, :]"},
		{"layernorm_linear", "stats-rows-store-unmasked", classTailMask, statsKernel, "tl.store(RSTD + rows, rstd, mask=rmask)", "tl.store(RSTD + rows, rstd)"},
		{"layernorm_linear", "var-unmasked", classLoadMask, stats,
			"d = tl.where((cols < K)[None, :], xs - mean[:, None], 0.0)", "d = xs - mean[:, None]"},
		{"layernorm_linear", "chunked-var-unmasked", classLoadMask, stats,
			"d = tl.where((cols < K)[None, :], _shifted(X, x0, rmask, cols, K, sxk) - mean[:, None], 0.0)",
			"d = _shifted(X, x0, rmask, cols, K, sxk) - mean[:, None]"},
		{"layernorm_linear", "mean-over-block", classReduce, stats, "mean = tl.sum(xs, axis=1) / K", "mean = tl.sum(xs, axis=1) / BLOCK_K"},
		{"layernorm_linear", "mean-as-max", classReduce, stats, "mean = tl.sum(acc, axis=1) / K", "mean = tl.max(acc, axis=1)"},
		{"layernorm_linear", "var-wrong-axis", classReduce, stats, "var = tl.sum(d * d, axis=1) / K", "var = tl.sum(d * d, axis=0) / K"},
		{"layernorm_linear", "shift-not-added-back", classFormula, stats, "return tl.sum(x0, axis=1) + mean, _rstd(var, eps)", "return mean, _rstd(var, eps)"},
		{"layernorm_linear", "eps-dropped", classEps, "def _rstd(", "rstd = 1.0 / tl.sqrt(var + eps)", "rstd = 1.0 / tl.sqrt(var)"},
		{"layernorm_linear", "eps-hardcoded", classEps, "def _stats(", "float(eps)),", "1e-6),"},
		{"layernorm_linear", "flat-guard-dropped", classFormula, "def _rstd(", "rstd = tl.where(var == 0.0, 0.0, rstd)", "rstd = rstd"},
		{"layernorm_linear", "stats-row-stride-k", classStride, statsKernel, "X + rows.to(tl.int64)[:, None] * sxm", "X + rows.to(tl.int64)[:, None] * K"},
		{"layernorm_linear", "stats-col-stride-1", classStride, shifted, "cols.to(tl.int64)[None, :] * sxk", "cols.to(tl.int64)[None, :]"},
		{"layernorm_linear", "stats-last-chunk-dropped", classRowLoop, stats,
			"        while start < K:\n            acc += _shifted(", "        while start < K - BLOCK_K:\n            acc += _shifted("},
		{"layernorm_linear", "stats-row-int32", index32, statsKernel, "X + rows.to(tl.int64)[:, None] * sxm", "X + rows[:, None] * sxm"},
		{"layernorm_linear", "stats-col-int32", index32, shifted, "cols.to(tl.int64)[None, :] * sxk", "cols[None, :] * sxk"},
		{"layernorm_linear", "no-rstd", classScale, epi, "y = rstd[:, None] * (acc - mean[:, None] * s[None, :])", "y = acc - mean[:, None] * s[None, :]"},
		{"layernorm_linear", "colsum-misindexed", classBiasIndex, epi, "s = tl.load(S + rn, mask=rn < N, other=0.0)", "s = tl.load(S + rn // 2, mask=rn < N, other=0.0)"},
		{"layernorm_linear", "bias-misindexed", classBiasIndex, epi, "tl.load(BF + rn, mask=rn < N,", "tl.load(BF + rn // 2, mask=rn < N,"},
		// the fold's one-launch path (eager use: the statistics gathered in the GEMM's K loop;
		// under the interpreter an M of M % 5 == 4, ALIAS's 9 rows and SMALL's 14 among them)
		{"layernorm_linear", "gemm-stats-shift-not-added-back", classFormula, fwd, "mean = x0 + mean", "mean = mean"},
		{"layernorm_linear", "gemm-stats-eps-hardcoded", classEps, fwd, "rstd = _rstd(m2 / K, eps)", "rstd = _rstd(m2 / K, 1e-6)"},
		{"layernorm_linear", "gemm-stats-over-block", classReduce, fwd, "rstd = _rstd(m2 / K, eps)", "rstd = _rstd(m2 / BLOCK_K, eps)"},
		{"layernorm_linear", "gemm-stats-not-computed", classFormula, "def layernorm_linear(", "STATS=in_kernel,", "STATS=False,"},
		{"layernorm_linear", "chunk-tail-unmasked", classLoadMask, "def _stats_step(", "e = tl.where(kmask[None, :], e, 0.0)", "e = e"},
		{"layernorm_linear", "chunk-count-block", classRowLoop, "def _stats_step(", "kc = tl.minimum(K - k0, BLOCK_K) * 1.0", "kc = BLOCK_K * 1.0"},
		{"layernorm_linear", "chunk-merge-term-dropped", classFormula, "def _stats_step(", " + delta * delta * (n * kc / tot)", ""},
		{"layernorm_linear", "chunk-mean-weight", classFormula, "def _stats_step(", "mean = mean + delta * (kc / tot)", "mean = mean + delta"},
		{"layernorm_linear", "k-mask-le", classMaskLE, fwd, "kmask = kk < K", "kmask = kk <= K"},
		{"layernorm_linear", "store-unmasked", classTailMask, fwd, "y, mask=mask)", "y)"},
		{"layernorm_linear", "bf16-dot", classUpcast, fwd, "tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=_F32_DOT)", "tl.dot(a, b, acc, input_precision=_F32_DOT)"},
		{"layernorm_linear", "a-col-stride-1", classStride, fwd, "rk64[None, :] * sak", "rk64[None, :]"},
		{"layernorm_linear", "a-advance-1", classStride, fwd, "a_ptr += a_step", "a_ptr += BLOCK_K"},
		{"layernorm_linear", "last-k-block-dropped", classRowLoop, fwd, "for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K, BLOCK_K):"},
		{"layernorm_linear", "a-row-int32", index32, fwd, "ra = (rm % M).to(tl.int64)", "ra = rm % M"},
		{"layernorm_linear", "a-col-int32", index32, fwd, "rk64[None, :] * sak", "rk[None, :] * sak"},
		{"layernorm_linear", "a-step-int32", index32, fwd, "a_step = BLOCK_K * tl.cast(sak, tl.int64)", "a_step = BLOCK_K * sak"},
		{"layernorm_linear", "y-row-int32", index32, fwd, "rm.to(tl.int64)[:, None] * sym", "rm[:, None] * sym"},
		{"layernorm_linear", "y-col-int32", index32, fwd, "rn.to(tl.int64)[None, :] * syn", "rn[None, :] * syn"},
		{"layernorm_linear", "norm-mean-sign", classFormula, fwd, "(a.to(tl.float32) - mean[:, None])", "(a.to(tl.float32) + mean[:, None])"},
		{"layernorm_linear", "norm-no-rstd", classScale, fwd, "- mean[:, None]) * rstd[:, None]", "- mean[:, None])"},
		{"layernorm_linear", "norm-gamma-index", classBiasIndex, fwd, "tl.load(G + kk, mask=kmask,", "tl.load(G + rk, mask=kmask,"},
		{"layernorm_linear", "norm-beta-dropped", classFormula, fwd, "a = a + tl.load(BETA + kk,", "a = a + 0 * tl.load(BETA + kk,"},
		{"layernorm_linear", "norm-bias-by-row", classBiasIndex, fwd, "acc += tl.load(BIAS + rn, mask=rn < N,", "acc += tl.load(BIAS + rm, mask=rm < N,"},
		{"layernorm_linear", "tma-w-tile-at-m", classStride, tma, "w = w_desc.load([off_n, k0])", "w = w_desc.load([off_m, k0])"},
		{"layernorm_linear", "tma-bf16-dot", classUpcast, tma, "tl.dot(a.to(tl.float32), w.to(tl.float32).T, acc, input_precision=_F32_DOT)", "tl.dot(a, w.T, acc, input_precision=_F32_DOT)"},
		{"layernorm_linear", "tma-last-k-block-dropped", classRowLoop, tma, "for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K, BLOCK_K):"},
		{"layernorm_linear", "out-overlap-unchecked", overlap, "def layernorm_linear(", `_check_alias("layernorm_linear", [("out", out)], ins)`, "pass"},
		{"layernorm_linear", "out-overlap-x-unchecked", overlap, "def layernorm_linear(", `ins = [("x", x), `, `ins = [`},
		// the backward (LayerNormLinearFunction: _ln_bwd_kernel's one pass, ATen's for rows
		// past MAX_BWD_K, the partial sums) and the fold's one pass over W (_fold_kernel)
		{"layernorm_linear", "bwd-flat-guard-dropped", classFormula, bwdTile, "rstd = tl.where(rstd == 0.0, flat, rstd)", "rstd = rstd"},
		{"layernorm_linear", "bwd-x-col-stride-1", classStride, bwdTile, "cols[None, :] * sxk, mask=m", "cols[None, :], mask=m"},
		{"layernorm_linear", "bwd-x-row-stride-k", classStride, bwdTile, "X + rm[:, None] * sxm", "X + rm[:, None] * K"},
		{"layernorm_linear", "bwd-mask-le", classMaskLE, bwd, "cm = cols < K", "cm = cols <= K"},
		{"layernorm_linear", "bwd-mean-over-block", classReduce, bwdTile, "(c1 / K)[:, None]", "(c1 / BLOCK_K)[:, None]"},
		{"layernorm_linear", "bwd-c2-dropped", classFormula, bwdTile, " + (c2 / K)[:, None]))", "))"},
		{"layernorm_linear", "bwd-no-gamma", classFormula, bwdTile, "wdy = dxn * gamma[None, :]", "wdy = dxn"},
		{"layernorm_linear", "bwd-xn-beta-dropped", classFormula, bwdTile, "xn = xn + beta[None, :]", "xn = xn"},
		{"layernorm_linear", "bwd-dgamma-wrong", classReduce, bwdTile, "dg += tl.sum(dxn * xhat, axis=0)", "dg += tl.sum(dxn, axis=0)"},
		{"layernorm_linear", "bwd-last-tile-dropped", classRowLoop, bwd, "while r < end:", "while r < end - BLOCK_M:"},
		{"layernorm_linear", "bwd-col-int32", index32, bwd, "cols = tl.arange(0, BLOCK_K).to(tl.int64)", "cols = tl.arange(0, BLOCK_K)"},
		{"layernorm_linear", "bwd-eps-hardcoded", classEps, "def _ln_backward(", "float(eps)),", "1e-6),"},
		{"layernorm_linear", "bwd-long-rows-rstd", classFormula, "def _ln_backward(", "1.0 / math.sqrt(eps)", "0.0"},
		{"layernorm_linear", "fold-gamma-dropped", classFormula, fold, "wf = _cast(w * tl.load(G + cols", "wf = _cast(w * 0 + tl.load(G + cols"},
		{"layernorm_linear", "fold-beta-wrong", classFormula, fold, "bacc += w * tl.load(BETA + cols", "bacc += tl.load(BETA + cols"},
		{"layernorm_linear", "fold-last-chunk-dropped", classRowLoop, fold, "    while start < K:\n        cols = start", "    while start < K - BLOCK_K:\n        cols = start"},
		{"layernorm_linear", "fold-w-stride-k", classStride, fold, "r64[:, None] * swn", "r64[:, None] * K"},
		// the library path (the normalized input, then cuBLAS): the interpreter takes it in
		// every other bucket of M
		{"layernorm_linear", "lib-bias-dropped", classBiasIndex, "def layernorm_linear(",
			"torch.addmm(bias, xn, weight.t(), out=y.view(M, N))", "torch.mm(xn, weight.t(), out=y.view(M, N))"},
		{"layernorm_linear", "lib-gamma-dropped", classFormula, "def layernorm_linear(",
			"_vector(ln_weight), _vector(ln_bias), mean, rstd", "None, _vector(ln_bias), mean, rstd"},
		{"layernorm_linear", "lib-beta-dropped", classFormula, "def layernorm_linear(",
			"_vector(ln_weight), _vector(ln_bias), mean, rstd", "_vector(ln_weight), None, mean, rstd"},
	}...)
	// attention: the score tile (scale, causal mask, Sk tail), the online softmax, causal block
	// skipping and the finite fill's rows masked everywhere (verify's spec: causal with fill
	// "min", Sq != Sk and Sq > Sk among the adversarial shapes), dropout (the grad cases run
	// both p's: a mask the forward and backward draw at different counters), the 64-bit batch
	// offset (the FAR case), strides and head-dim padding (D = 80), the FlashAttention-2
	// backward and its interior tiles (no edge tests), the inference path (no statistics), the
	// rounding levels; the variants' bool and additive masks, the learned bias and its
	// gradient, ALiBi. Not here, pinned by the template's own tests
	// (templates/attention/test_kernel.py): the keep mask's Philox mapping (dropout_mask shares
	// it, so a change moves kernel and reference together), the bias gradient summed over Sq in
	// the kernel (no variant has a bias that broadcasts over Sq and trains), the scale folded
	// into exp2 (no variant folds: fp16 rounds its scaled scores, the others fill with
	// finfo.min or add a mask or bias), the packed roundings of the GPU (the interpreter takes
	// the plain path).
	scores, block := "def _scores(", "def _fwd_block("
	afwd, bwdTile := "def _attn_fwd(", "def _bwd_tile("
	dkdv, dq := "def _attn_bwd_dkdv(", "def _attn_bwd_dq("
	ms = append(ms, []mutation{
		{"attention", "missing-scale", classScale, scores, "s = _round(s * scale, DT, ROUND == 1)", "s = _round(s, DT, ROUND == 1)"},
		{"attention", "causal-le", classMaskLE, scores, "s = tl.where(cols > rows + (Sk - Sq), fill, s)", "s = tl.where(cols >= rows + (Sk - Sq), fill, s)"},
		{"attention", "causal-top-left", classFormula, scores, "s = tl.where(cols > rows + (Sk - Sq), fill, s)", "s = tl.where(cols > rows, fill, s)"},
		{"attention", "sk-tail-unmasked", classTailMask, scores, `s = tl.where(cols < Sk, s, float("-inf"))`, "s = s"},
		{"attention", "no-rescale-acc", classFormula, block, "acc = _mm(_cast(pr, DT), v, acc * alpha[:, None])", "acc = _mm(_cast(pr, DT), v, acc)"},
		// a row whose first key blocks are all -inf (left padding as -inf: attention+additive's
		// second mask row) gets exp(-inf - -inf) = NaN without the running max's guard
		{"attention", "running-max-guard-dropped", classFormula, block, `m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)`, "m_safe = m_new"},
		{"attention", "no-rescale-sum", classFormula, block, "l_i = l_i * alpha + tl.sum(pr, axis=1)", "l_i = l_i + tl.sum(pr, axis=1)"},
		{"attention", "max-as-sum", classReduce, block, "m_new = tl.maximum(m_i, tl.max(s, axis=1))", "m_new = tl.maximum(m_i, tl.sum(s, axis=1))"},
		{"attention", "sum-wrong-axis", classReduce, block, "l_i = l_i * alpha + tl.sum(pr, axis=1)", "l_i = l_i * alpha + tl.sum(pr, axis=0)"},
		{"attention", "dropout-keep-ignored", classFormula, block, "pr = tl.where(_keep(seed, bh, rows, n0, thresh, BLOCK_N), pr, 0.0)", "pr = pr"},
		{"attention", "dropout-fwd-tile-start", classBiasIndex, block, "_keep(seed, bh, rows, n0, thresh, BLOCK_N)", "_keep(seed, bh, rows, 0, thresh, BLOCK_N)"},
		{"attention", "dropout-fwd-head-shared", classBiasIndex, block, "_keep(seed, bh, rows, n0, thresh, BLOCK_N)", "_keep(seed, 0, rows, n0, thresh, BLOCK_N)"},
		{"attention", "dropout-bwd-tile-start", classBiasIndex, bwdTile, "_keep(seed, bh, rows, n0, thresh, k.shape[0])", "_keep(seed, bh, rows, 0, thresh, k.shape[0])"},
		{"attention", "k-col-stride-1", classStride, block, "k = tl.load(K + kcols * skn + dcols * skd,", "k = tl.load(K + kcols * skn + dcols,"},
		{"attention", "q-row-stride-d", classStride, afwd, "q = tl.load(Q + rows * sqm + dcols * sqd,", "q = tl.load(Q + rows * HEAD_D + dcols * sqd,"},
		{"attention", "head-dim-unmasked", classTailMask, afwd, "io_mask = (rows < Sq) & (dcols < HEAD_D)", "io_mask = (rows < Sq) & (dcols < BLOCK_D)"},
		{"attention", "batch-int32", classIndex32, afwd, "b = (bh // H).to(tl.int64)", "b = bh // H"},
		{"attention", "causal-full-past-diagonal", classFormula, "def _causal_full(",
			"full = tl.minimum(full, tl.maximum(m0 + (Sk - Sq) + 1, 0) // BLOCK_N * BLOCK_N)", "full = full"},
		{"attention", "causal-hi-one-block-short", classRowLoop, "def _causal_hi(",
			"hi = tl.minimum(Sk, tl.maximum(m0 + BLOCK_M + (Sk - Sq), 0))", "hi = tl.minimum(Sk, tl.maximum(m0 + (Sk - Sq), 0))"},
		{"attention", "finite-fill-rows-skipped", classFormula, "def _causal_hi(", "hi = tl.where(m0 < Sq - Sk, Sk, hi)", "hi = hi"},
		{"attention", "dropout-no-pscale", classScale, afwd, "out = out * pscale", "out = out"},
		{"attention", "stats-max-dropped", classFormula, afwd, "tl.store(STATS + 2 * bh * Sq + r, m_i, mask=r < Sq)", "tl.store(STATS + 2 * bh * Sq + r, m_i * 0, mask=r < Sq)"},
		{"attention", "delta-max", classReduce, "def _attn_bwd_delta(", "tl.sum(o * do, axis=1)", "tl.max(o * do, axis=1)"},
		{"attention", "bwd-no-delta", classFormula, bwdTile, "ds = pr * (dp - delta)", "ds = pr * dp"},
		{"attention", "bwd-p-unnormalised", classFormula, bwdTile, "pr = tl.exp2((s - m) * 1.4426950408889634) * inv_l", "pr = tl.exp2((s - m) * 1.4426950408889634)"},
		{"attention", "bwd-exp-units", classScale, bwdTile, "pr = tl.exp2((s - m) * 1.4426950408889634) * inv_l", "pr = tl.exp2(s - m) * inv_l"},
		{"attention", "bwd-dp-keep-ignored", classFormula, bwdTile, "dp = tl.where(keep, dp * pscale, 0.0)", "dp = dp"},
		{"attention", "bwd-dv-undropped", classFormula, bwdTile, "pd = tl.where(keep, _round(pr, DT, ROUND) * pscale, 0.0)", "pd = tl.where(keep, _round(pr, DT, ROUND), 0.0)"},
		{"attention", "bwd-fill-not-zeroed", classFormula, bwdTile, "dsq = tl.where(_filled(rows, cols, Sq, Sk, MASK, smm, smn, MASK_KIND), 0.0, dsq)", "dsq = dsq"},
		{"attention", "bwd-no-scale", classScale, bwdTile, "return _cast(pd, DT), ds, dsq * scale", "return _cast(pd, DT), ds, dsq"},
		{"attention", "dkdv-causal-start-late", classRowLoop, dkdv, "lo = tl.maximum(n0 - (Sk - Sq), 0) // BLOCK_M * BLOCK_M", "lo = n0 // BLOCK_M * BLOCK_M"},
		{"attention", "dkdv-finite-rows-skipped", classFormula, dkdv, "lo = tl.where(Sq > Sk, 0, lo)", "lo = lo"},
		{"attention", "bwd-other-seed", classFormula, "def backward(", "tseed if ctx.seed is None else ctx.seed", "0"},
		{"attention", "bwd-causal-fill-kept-on-edge", classFormula, bwdTile, "(MASK_KIND == 3 and EDGE)", "(MASK_KIND == 3 and not EDGE)"},
		{"attention", "bwd-bool-fill-kept", classFormula, bwdTile, "if MASK_KIND == 1 or (MASK_KIND == 3 and EDGE):", "if MASK_KIND == 3 and EDGE:"},
		{"attention", "dkdv-diagonal-interior", classFormula, dkdv,
			"mid = tl.maximum(lo, tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - (Sk - Sq), 0), BLOCK_M) * BLOCK_M)", "mid = lo"},
		{"attention", "dkdv-diagonal-block-short", classRowLoop, dkdv, "tl.maximum(n0 + BLOCK_N - 1 - (Sk - Sq), 0)", "tl.maximum(n0 - (Sk - Sq), 0)"},
		{"attention", "dq-all-interior", classTailMask, dq, "full = _causal_full(m0, Sq, Sk, BLOCK_N, MASK_KIND == 3)", "full = hi"},
		// tile-dependent bugs, invisible at the interpreter's one 16 x 16 tile and killed only by
		// the tile cases (adapter.tile_cases: every tile candidate the GPU could pick, forced, at
		// S = 168): the dK/dV kernel stepping over query blocks by BLOCK_N, which drops whole
		// query blocks' contributions to dK and dV wherever BLOCK_M < BLOCK_N (dK wrong by a
		// large factor, as the H200 gradient check of a causal bf16 [4, 16, 512, 64] found);
		// the forward's and dQ kernel's causal key range ended one key block, not one query
		// block, past the block's first row (keys missing where BLOCK_N < BLOCK_M)
		{"attention", "dkdv-step-block-n", classRowLoop, dkdv,
			"STORE_DS, False, HEAD_D, BLOCK_M)\n            m0 += BLOCK_M", "STORE_DS, False, HEAD_D, BLOCK_M)\n            m0 += BLOCK_N"},
		{"attention", "fwd-causal-hi-block-n", classRowLoop, afwd,
			"hi = _causal_hi(m0, Sq, Sk, BLOCK_M, MASK_KIND == 3, FINITE_FILL)", "hi = _causal_hi(m0, Sq, Sk, BLOCK_N, MASK_KIND == 3, FINITE_FILL)"},
		{"attention", "dq-causal-hi-block-n", classRowLoop, dq,
			"hi = _causal_hi(m0, Sq, Sk, BLOCK_M, MASK_KIND == 3, FINITE_FILL)", "hi = _causal_hi(m0, Sq, Sk, BLOCK_N, MASK_KIND == 3, FINITE_FILL)"},
		{"attention", "inference-stats-into-out", classAlias, "def _forward(", "STORE_STATS=lse_ is not None", "STORE_STATS=True"},
		{"attention", "rounding-level-2-none", classFormula, "def _rounding(", "        return 2\n", "        return 0\n"},
		{"attention", "bool-mask-inverted", classFormula, scores, "s = tl.where(mk != 0, fill, s)", "s = tl.where(mk == 0, fill, s)"},
		{"attention", "mask-col-stride-row", classStride, scores, "a = tl.load(MASK + rows * smm + cols * smn,", "a = tl.load(MASK + rows * smm + cols * smm,"},
		{"attention", "bias-row-stride-col", classStride, scores, "bb = tl.load(BIAS + rows * sbm + cols * sbn,", "bb = tl.load(BIAS + rows * sbn + cols * sbn,"},
		{"attention", "bias-head-offset-dropped", classBiasIndex, afwd, "BIAS += b * sbb + h * sbh", "BIAS += b * sbb"},
		{"attention", "bwd-bias-head-offset-dropped", classBiasIndex, dq, "BIAS += b * sbb + h * sbh", "BIAS += b * sbb"},
		{"attention", "alibi-sign", classFormula, scores, "slope * (cols - rows - (Sk - Sq))", "slope * (rows - cols - (Sk - Sq))"},
		{"attention", "dbias-plane-offset", classBiasIndex, dkdv, "DS += bh * Sq * Sk", "DS += bh * Sk"},
		{"attention", "dbias-batch-plane-shared-by-heads", classBiasIndex, dkdv, "+ tl.where(sbh == 0, 0, h)) * Sq * Sk", ") * Sq * Sk"},
		{"attention", "dbias-broadcast-not-summed", classReduce, "def _sum_to(",
			"dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1]", "dims = list(range(lead))"},
	}...)

	// cross_entropy: the forward's online log-sum-exp (rows of 300 and 1500 loop over chunks
	// of 128 in the interpreter; EXTREME's rows of -inf), the mean's count, the backward's
	// one-hot and scale, and the target's and the gradient's indexing. No upcast mutant: each
	// 16-bit load meets an fp32 operand first (the running max, the log-sum-exp), which
	// promotes it, and a maximum of 16-bit values is exact: dropping .to(tl.float32) is an
	// equivalent mutant there.
	cfwd, cred, cbwd := "def _ce_fwd(", "def _ce_reduce(", "def _ce_bwd("
	ms = append(ms, []mutation{
		{"cross_entropy", "fwd-mask-le", classMaskLE, cfwd, "mask=cols < V, other=float(\"-inf\"))", "mask=cols <= V, other=float(\"-inf\"))"},
		{"cross_entropy", "fwd-other-zero", classLoadMask, cfwd, "mask=cols < V, other=float(\"-inf\"))", "mask=cols < V, other=0.0)"},
		{"cross_entropy", "fwd-shift-unguarded", classFormula, cfwd, "shift = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "shift = m_new"},
		{"cross_entropy", "fwd-no-rescale", classFormula, cfwd, "s = s * tl.exp(m - shift) + tl.sum(", "s = s + tl.sum("},
		{"cross_entropy", "fwd-max-as-sum", classReduce, cfwd, "m_new = tl.maximum(m, tl.max(x, axis=0))", "m_new = tl.maximum(m, tl.sum(x, axis=0))"},
		{"cross_entropy", "fwd-sum-as-max", classReduce, cfwd, "tl.sum(tl.exp(x - shift), axis=0)", "tl.max(tl.exp(x - shift), axis=0)"},
		{"cross_entropy", "fwd-exp2", classFormula, cfwd, "tl.sum(tl.exp(x - shift), axis=0)", "tl.sum(tl.exp2(x - shift), axis=0)"},
		{"cross_entropy", "fwd-last-chunk-dropped", classRowLoop, cfwd, "while start < V:  #", "while start < V - BLOCK_V:  #"},
		{"cross_entropy", "fwd-col-stride-1", classStride, cfwd, "x = tl.load(X + cols * sxv,", "x = tl.load(X + cols,"},
		{"cross_entropy", "fwd-row-stride-v", classStride, cfwd, "X += row * sxm", "X += row * V"},
		{"cross_entropy", "fwd-cols-int32", classIndex32, cfwd, "offs = tl.arange(0, BLOCK_V).to(tl.int64)", "offs = tl.arange(0, BLOCK_V)"},
		{"cross_entropy", "target-stride-1", classStride, cfwd, "t = tl.load(T + row * st)", "t = tl.load(T + row)"},
		{"cross_entropy", "target-col-stride-1", classStride, cfwd, "X + t.to(tl.int64) * sxv", "X + t.to(tl.int64)"},
		{"cross_entropy", "ignored-not-zero", classFormula, cfwd,
			"tl.where(ignored, 0.0, tl.where(inside, nll, float(\"nan\")))", "tl.where(inside, nll, float(\"nan\"))"},
		{"cross_entropy", "loss-sign", classFormula, cfwd, "lse - xt", "xt - lse"},
		{"cross_entropy", "mean-over-rows", classReduce, cred, "total = total / n", "total = total / M"},
		{"cross_entropy", "count-ignored-rows", classReduce, cred, "cnt += tl.where(m & (t != ignore_index), 1.0, 0.0)", "cnt += tl.where(m, 1.0, 0.0)"},
		{"cross_entropy", "reduce-last-chunk-dropped", classRowLoop, cred, "while start < M:", "while start < M - BLOCK:"},
		{"cross_entropy", "reduce-target-stride-1", classStride, cred, "t = tl.load(T + rows * st,", "t = tl.load(T + rows,"},
		{"cross_entropy", "bwd-onehot-dropped", classFormula, cbwd, "d = tl.where(cols == t, p - hit, p) * g", "d = p * g"},
		{"cross_entropy", "bwd-lse-dropped", classFormula, cbwd, "p = tl.exp(x - lse)", "p = tl.exp(x)"},
		{"cross_entropy", "bwd-mean-not-divided", classScale, cbwd, "g = g / tl.load(COUNT)", "g = g"},
		{"cross_entropy", "bwd-ignored-not-zeroed", classFormula, cbwd,
			"g = tl.where(t == ignore_index, 0.0, tl.where(inside, g, float(\"nan\")))", "g = tl.where(inside, g, float(\"nan\"))"},
		{"cross_entropy", "bwd-dloss-stride-1", classStride, cbwd, "g = tl.load(DLOSS + row * sdl)", "g = tl.load(DLOSS + row)"},
		{"cross_entropy", "bwd-col-stride-1", classStride, cbwd, "x = tl.load(X + cols * sxv,", "x = tl.load(X + cols,"},
		{"cross_entropy", "bwd-store-unmasked", classTailMask, cbwd, "_cast(d, DX.dtype.element_ty), mask=m)", "_cast(d, DX.dtype.element_ty))"},
		{"cross_entropy", "bwd-last-chunk-dropped", classRowLoop, cbwd, "while start < V:", "while start < V - BLOCK_V:"},
		{"cross_entropy", "bwd-cols-int32", classIndex32, cbwd, "offs = tl.arange(0, BLOCK_V).to(tl.int64)", "offs = tl.arange(0, BLOCK_V)"},
		{"cross_entropy", "ignore-index-hardcoded", classFormula, "def _forward(", "int(ignore_index), label_smoothing)", "-100, label_smoothing)"},
		// label smoothing (the +sum folder's 0.1)
		{"cross_entropy", "smooth-sum-last-col", classMaskLE, cfwd, "sx += tl.sum(tl.where(cols < V, x, 0.0), axis=0)", "sx += tl.sum(tl.where(cols < V - 1, x, 0.0), axis=0)"},
		{"cross_entropy", "smooth-mean-over-block", classReduce, cfwd, "smoothing * (lse - sx / V)", "smoothing * (lse - sx / BLOCK_V)"},
		{"cross_entropy", "smooth-nll-unscaled", classScale, cfwd, "nll = (1.0 - smoothing) * nll + smoothing", "nll = nll + smoothing"},
		{"cross_entropy", "smooth-not-passed", classFormula, "def _forward(", "SMOOTH=label_smoothing != 0.0", "SMOOTH=False"},
		{"cross_entropy", "bwd-smooth-spread-dropped", classFormula, cbwd, "p = tl.exp(x - lse) - spread", "p = tl.exp(x - lse)"},
		{"cross_entropy", "bwd-smooth-hit-one", classScale, cbwd, "d = tl.where(cols == t, p - hit, p) * g", "d = tl.where(cols == t, p - 1.0, p) * g"},
	}...)
	return ms
}()
