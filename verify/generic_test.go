package verify

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fuseadvise/fuseadvise/internal/shared"
)

var genericFlag = flag.Bool("generic", false, "TestGenericMutants: run the generic textual mutants on the folders generated from three shared training traces (opt-in; past 45 min on 2 cores: shard it with -generic.pattern)")

var genericPattern = flag.String("generic.pattern", "", "TestGenericMutants: mutate only these patterns' kernels (comma-separated; their folders' baseline only)")

var genericExamples = flag.String("generic.examples", "", "TestGenericMutants: also mutate these of codegen's generic examples (comma-separated names, or all), as folders of the generic pattern")

// genericTraces are the shared training traces whose generated folders TestGenericMutants
// mutates (relative to the shared folder).
var genericTraces = []string{
	"traces/h200/bert_train_bf16.json.gz",
	"traces/h200/gpt2_train_bf16.json.gz",
	"traces/h200/llama_train_bf16.json.gz",
}

// A genericOp is a textual mutation operator that knows nothing about the templates: it is
// applied at every site where it matches in the code of a @triton.jit function.
type genericOp struct {
	Name  string
	Sites func(code string) [][2]int          // byte ranges of the sites in one line's code
	Edit  func(code string, at [2]int) string // the line's code with the site at mutated
}

func literalSites(lit string) func(string) [][2]int {
	return func(code string) [][2]int {
		var out [][2]int
		for i := 0; ; {
			j := strings.Index(code[i:], lit)
			if j < 0 {
				return out
			}
			out = append(out, [2]int{i + j, i + j + len(lit)})
			i += j + len(lit)
		}
	}
}

func replaceWith(s string) func(string, [2]int) string {
	return func(code string, at [2]int) string { return code[:at[0]] + s + code[at[1]:] }
}

var (
	floatLit = regexp.MustCompile(`(?:^|[^\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)`)
	divN     = regexp.MustCompile(`/ N\b`)
	rstdDef  = regexp.MustCompile(`^(\s*)rstd = (.+?)\s*$`)
	negInf   = regexp.MustCompile(`-float\(["']inf["']\)|float\(["']-inf["']\)`)
)

var genericOps = []genericOp{
	{"lt-le", func(code string) [][2]int { // a comparison < (not <<, <=)
		var out [][2]int
		for i := 0; i < len(code); i++ {
			if code[i] == '<' && (i == 0 || code[i-1] != '<') && (i+1 == len(code) || (code[i+1] != '<' && code[i+1] != '=')) {
				out = append(out, [2]int{i, i + 1})
			}
		}
		return out
	}, replaceWith("<=")},
	{"max-min", literalSites("tl.max("), replaceWith("tl.min(")},
	{"sum-max", literalSites("tl.sum("), replaceWith("tl.max(")},
	{"exp-exp2", literalSites("tl.exp("), replaceWith("tl.exp2(")},
	{"const-x1.001", func(code string) [][2]int {
		var out [][2]int
		for _, m := range floatLit.FindAllStringSubmatchIndex(code, -1) {
			if v, err := strconv.ParseFloat(code[m[2]:m[3]], 64); err == nil && v != 0 {
				out = append(out, [2]int{m[2], m[3]})
			}
		}
		return out
	}, func(code string, at [2]int) string {
		v, _ := strconv.ParseFloat(code[at[0]:at[1]], 64)
		return code[:at[0]] + strconv.FormatFloat(v*1.001, 'g', 17, 64) + code[at[1]:]
	}},
	{"rstd-x1.01", func(code string) [][2]int {
		if m := rstdDef.FindStringSubmatchIndex(code); m != nil && balanced(code[m[4]:m[5]]) {
			return [][2]int{{m[4], m[5]}}
		}
		return nil
	}, func(code string, at [2]int) string {
		return code[:at[0]] + "(" + code[at[0]:at[1]] + ") * 1.01" + code[at[1]:]
	}},
	{"neginf-zero", func(code string) [][2]int {
		var out [][2]int
		for _, m := range negInf.FindAllStringIndex(code, -1) {
			out = append(out, [2]int{m[0], m[1]})
		}
		return out
	}, replaceWith("0.0")},
	{"eps-dropped", literalSites("+ eps"), replaceWith("+ 0.0")},
	{"div-n1", func(code string) [][2]int {
		var out [][2]int
		for _, m := range divN.FindAllStringIndex(code, -1) {
			out = append(out, [2]int{m[0], m[1]})
		}
		return out
	}, replaceWith("/ (N + 1)")},
}

func balanced(s string) bool {
	d := 0
	for _, c := range s {
		switch c {
		case '(', '[':
			d++
		case ')', ']':
			d--
		}
		if d < 0 {
			return false
		}
	}
	return d == 0
}

// genericSite is one generic mutant: op applied at one site of a @triton.jit function.
type genericSite struct {
	Op   string
	Func string // the jit function's name
	Line int    // 0-based line index in kernel.py
	Key  string // "func op: line text[#k]" (k: the site's index among op's sites on the line, when several)
	Src  string // the mutated kernel.py
}

// genericSites returns every generic mutant of src: each operator at each site in the code
// (not comments or docstrings) of the @triton.jit functions.
func genericSites(src string) []genericSite {
	lines := strings.Split(src, "\n")
	var out []genericSite
	injit, body, doc := false, false, false
	fn := ""
	for i, ln := range lines {
		switch {
		case strings.HasPrefix(ln, "@triton.jit"):
			injit, body, doc = true, false, false
			continue
		case !injit:
			continue
		case strings.HasPrefix(ln, "def "):
			if body { // a plain def after a jit function
				injit = false
				continue
			}
			fn = strings.TrimPrefix(ln, "def ")
			fn = fn[:strings.IndexAny(fn+"(", "(")]
			body = true
			continue
		case body && ln != "" && ln[0] != ' ' && ln[0] != '\t' && ln[0] != ')' && ln[0] != '#':
			injit = false
			continue
		}
		// docstrings: skip the lines from an opening """ to its close
		if n := strings.Count(ln, `"""`); n > 0 || doc {
			if n%2 == 1 {
				doc = !doc
			}
			continue
		}
		code := ln
		if j := strings.Index(code, "#"); j >= 0 {
			code = code[:j]
		}
		for _, op := range genericOps {
			sites := op.Sites(code)
			for k, at := range sites {
				key := fmt.Sprintf("%s %s: %s", fn, op.Name, strings.TrimSpace(code))
				if len(sites) > 1 {
					key += fmt.Sprintf(" #%d", k+1)
				}
				mut := slices.Clone(lines)
				mut[i] = op.Edit(code, at) + ln[len(code):]
				out = append(out, genericSite{Op: op.Name, Func: fn, Line: i, Key: key, Src: strings.Join(mut, "\n")})
			}
		}
	}
	// the same line text twice in a function: number the occurrences
	n := map[string]int{}
	for _, s := range out {
		n[s.Key]++
	}
	seen := map[string]int{}
	for i, s := range out {
		if n[s.Key] > 1 {
			seen[s.Key]++
			out[i].Key = fmt.Sprintf("%s @%d", s.Key, seen[s.Key])
		}
	}
	return out
}

// genericEquivalent lists the generic mutants that survive because they are equivalent
// (no input can tell them apart from the kernel under the interpreter's checks), keyed by
// "pattern/func op: line text[#k]", with the reason (docs/verify.md repeats them).
var genericEquivalent = map[string]string{
	"add_layernorm/_add_layernorm_fwd lt-le: while start < N: @1":                                                                eqLoop,
	"add_layernorm/_add_layernorm_fwd lt-le: while start < N: @2":                                                                eqLoop,
	"add_layernorm/_add_layernorm_fwd lt-le: while start < N: @3":                                                                eqLoop,
	"add_layernorm/_add_layernorm_fwd lt-le: s = tl.load(S + cols * ssn, mask=cols < N, other=0.0).to(tl.float32)":               "the value read at column N is dropped by the next line's tl.where(cols < N, ...)",
	"dropout_add/_keep const-x1.001: return u.to(tl.float32) >= p * 65536.0":                                                     "the keep threshold p*1.001 moves the keep rate by p/1000 (1e-4 at p = 0.1), far inside the rate check (6 sigma); forward, backward and dropout_mask agree",
	"dropout_add/_dropout_add_fwd lt-le: b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)":                             eqLoadPast,
	"gelu_pyops/_new_gelu_fwd lt-le: b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)":                                 eqLoadPast,
	"layernorm_linear/_row_stats lt-le: while start < K: @1":                                                                     eqLoop,
	"layernorm_linear/_row_stats lt-le: while start < K: @2":                                                                     eqLoop,
	"layernorm_linear/_row_stats sum-max: return tl.sum(x0, axis=1) + mean, _rstd(var, eps)":                                     "x0 is [ROWS, 1] (each row's first element): the sum and the max of one element are equal",
	"layernorm_linear/_fold_kernel lt-le: while start < K:":                                                                      eqLoop,
	"layernorm_linear/_ln_bwd_kernel lt-le: while r < end:":                                                                      eqTileLoop,
	"layernorm_linear/_sum_parts lt-le: while g < G:":                                                                            eqSumParts,
	"layernorm_linear/_fold_tma_kernel lt-le: mean = tl.load(MEAN + rm, mask=rm < M, other=0.0)":                                 eqLoadPast,
	"layernorm_linear/_fold_tma_kernel lt-le: rstd = tl.load(RSTD + rm, mask=rm < M, other=0.0)":                                 eqLoadPast,
	"layernorm_linear/_fold_epilogue lt-le: s = tl.load(S + rn, mask=rn < N, other=0.0)":                                         eqLoadPast,
	"layernorm_linear/_fold_epilogue lt-le: y += tl.load(BF + rn, mask=rn < N, other=0.0)[None, :]":                              eqLoadPast,
	"layernorm_linear/_ln_linear_kernel lt-le: acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]":        eqLoadPast,
	"linear_gelu/_epilogue lt-le: acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]":                     eqLoadPast,
	"linear_gelu/_erf lt-le: return tl.where(x < 0, -y, y)":                                                                      "differs only at x = 0, where the GELU multiplies erf (1e-9 there) by x = 0",
	"linear_gelu/_gelu const-x1.001: inner = 0.7978845608028654 * (x + 0.044715 * x * x * x) #2":                                 eqTol + "2.6e-5, 0.25 of atol + rtol |y|)",
	"mask_softmax/_mask_softmax_rows neginf-zero: safe = tl.where(mx == float(\"-inf\"), 0.0, mx)":                               eqSafe,
	"mask_softmax/_mask_softmax_long neginf-zero: safe = tl.where(mx == float(\"-inf\"), 0.0, mx)":                               eqSafe,
	"mask_softmax/_mask_softmax_long neginf-zero: safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)":                         "lanes whose running max is still -inf get a NaN running sum instead of 0, and total drops exactly those lanes (m_run == -inf)",
	"mask_softmax/_mask_softmax_long lt-le: while start < N: @1":                                                                 eqLoop,
	"mask_softmax/_mask_softmax_long lt-le: while start < N: @2":                                                                 eqLoop,
	"mask_softmax/_mask_kernel lt-le: while start < N:":                                                                          eqLoop,
	"mask_softmax/_softmax_dropout_bwd lt-le: while start < N: @1":                                                               eqLoop,
	"mask_softmax/_softmax_dropout_bwd lt-le: while start < N: @2":                                                               eqLoop,
	"rmsnorm_pyops/_rmsnorm_fwd lt-le: while start < N: @1":                                                                      eqLoop,
	"rmsnorm_pyops/_rmsnorm_fwd lt-le: while start < N: @2":                                                                      eqLoop,
	"rmsnorm_pyops/_rmsnorm_bwd_dx lt-le: while start < N: @1":                                                                   eqLoop,
	"rmsnorm_pyops/_rmsnorm_bwd_dx lt-le: while start < N: @2":                                                                   eqLoop,
	"rmsnorm_pyops/_rmsnorm_bwd lt-le: while r < end:":                                                                           eqTileLoop,
	"rmsnorm_pyops/_rmsnorm_bwd_tile lt-le: rstd = tl.load(RSTD + rm, mask=rm < end, other=0.0)":                                 eqLoadPast,
	"rmsnorm_pyops/_sum_parts lt-le: while g < G:":                                                                               eqSumParts,
	"dropout_add/_dropout_add_bwd lt-le: while r < end:":                                                                         eqTileLoop,
	"dropout_add/_sum_parts lt-le: while g < G:":                                                                                 eqSumParts,
	"linear_gelu/_gelu_bwd_kernel lt-le: while r < end:":                                                                         eqTileLoop,
	"linear_gelu/_sum_parts lt-le: while g < G:":                                                                                 eqSumParts,
	"gelu_pyops/_new_gelu_bwd lt-le: while r < end:":                                                                             eqTileLoop,
	"gelu_pyops/_new_gelu_bwd_tile lt-le: b = tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)":                            eqLoadPast,
	"gelu_pyops/_sum_parts lt-le: while g < G:":                                                                                  eqSumParts,
	"attention/_scores lt-le: inb = (rows < Sq) & (cols < Sk) #2":                                                                "a mask or bias value read at column Sk reaches only that column's score, which an edge tile then sets to -inf (cols < Sk); an interior tile has no column past Sk - 1",
	"attention/_attn_bwd_dq lt-le: m = tl.load(STATS + 2 * bh * Sq + rows, mask=rows < Sq, other=0.0)":                           eqDQRow,
	"attention/_attn_bwd_dq lt-le: inv_l = 1.0 / tl.load(STATS + (2 * bh + 1) * Sq + rows, mask=rows < Sq, other=1.0)":           eqDQRow,
	"attention/_attn_bwd_dq const-x1.001: inv_l = 1.0 / tl.load(STATS + (2 * bh + 1) * Sq + rows, mask=rows < Sq, other=1.0) #2": eqDQRow,
	"attention/_attn_bwd_dq lt-le: delta = tl.load(DELTA + bh * Sq + rows, mask=rows < Sq, other=0.0)":                           eqDQRow,
	"attention/_attn_bwd_dq lt-le: while n0 < hi:":                                                                               eqKeyBlock,
	"attention/_attn_fwd lt-le: while n0 < hi:":                                                                                  eqKeyBlock,
	"attention/_dkdv_block const-x1.001: inv_l = 1.0 / tl.load(STATS + Sq + rows, mask=rows < Sq, other=1.0) #2":                 eqPastSq,
	"attention/_dkdv_block lt-le: m = tl.load(STATS + rows, mask=rows < Sq, other=0.0)":                                          eqPastSq + " (row Sq reads its head's first row sum, at least 1: P stays finite)",
	"attention/_dkdv_block lt-le: tl.atomic_add(DS + rows * Sk + cols, ds, mask=(rows < Sq) & (cols < Sk)) #1":                   eqPastSq + " (the atomic adds row Sq's dS, 0, at row Sq: checked also with a per-key bias [1, H, 1, Sk] that trains, whose gradient sums dS over the rows; where row Sq lies past the buffer the add of 0 touches memory past it, which one run of the interpreter faulted on and the next did not)",
	"attention/_attn_bwd_dkdv lt-le: while m0 < Sq:":                                                                             "one more query block only when m0 == Sq: " + eqPastSq,
	"attention/_filled lt-le: inb = (rows < Sq) & (cols < Sk) #1":                                                                "the mask read at row Sq decides only whether row Sq's dS is zeroed: the dQ kernel does not store that row's dQ, and in the dK/dV kernel " + eqPastSq,
	"attention/_filled lt-le: inb = (rows < Sq) & (cols < Sk) #2":                                                                "the mask read at column Sk decides only whether column Sk's dS is zeroed: the dK/dV kernel does not store that key's dK, dV or bias-gradient column; in the dQ kernel column Sk lies in edge tiles only, where its score is -inf (P = 0) and V loads as 0 (dP = 0), so its dS is 0 either way and K's row Sk, loaded as 0, adds nothing",
	"attention/_causal_hi lt-le: hi = tl.where(m0 < Sq - Sk, Sk, hi)":                                                            "the query block at m0 == Sq - Sk visits every key instead of stopping at its last row's diagonal: its first row sees key 0, so no row of it is masked everywhere and every row's max is a real score, while the extra keys are past every row's diagonal and filled (a finite fill): exp gives P = 0, so the forward's running sums and output and the dQ kernel's dS are unchanged",
	"attention/_attn_bwd_delta lt-le: msk = (rows[:, None] < Sq) & (dcols < HEAD_D) #1":                                          "O and dO read at row Sq reach only row Sq's delta, whose store masks rows past Sq - 1 (the interpreter does not fault on the read)",
	"attention/_attn_bwd_dkdv lt-le: kv_mask = (ncols < Sk) & (dcols < HEAD_D) #1":                                               "K and V read at key Sk reach only column Sk of the dK/dV kernel's tiles (its score, P, dP, dS): dK and dV are each key's own column and the bias gradient a column sum, and every store masks keys past Sk - 1",
	"attention/_attn_bwd_dkdv lt-le: while m0 < mid:":                                                                            "the interpreter's loop (the GPU's is a tl.range): the query block at mid runs as an edge tile as well; it lies wholly on or below the key block's diagonal, where the edge tile's causal test fills nothing, and its other test (keys past Sk to -inf) changes only columns whose dK and dV are not stored; where mid is the query blocks' end, that block is past Sq: " + eqPastSq,
	"attention/_keep_kernel lt-le: while n0 < Sk:":                                                                               "one more key block only when n0 == Sk: its store masks every column (cols < Sk)",
	"add_layernorm/_sum_parts lt-le: while g < G:":                                                                               eqSumParts,
	"generic/_sum_parts lt-le: while g < G:":                                                                                     eqSumParts,
	"generic/_fused_bwd_kernel lt-le: while r0 < hi:":                                                                            "one more tile only when r0 == hi: every lane of it is masked (rows < hi, or kk < hi in the flat walk), so loads give 0, the sums add 0 and the stores are masked",
	"generic/_fused_bwd_kernel lt-le: rmask = rows < hi":                                                                         "survives only where every gradient is stored whole (KIND 0, no sums): the extra row is the next program's first, or past the last row wraps through the layout's padded outer dim (size 1, stride 0) onto row 0, so the same value is stored again where it already is; with a broadcast input's sums it is counted twice (killed)",
}

// genericBelowPrecision lists survivors that are not equivalent but change the result by less
// than the generated folders' dtype can show (all three traces are bf16), with the reason and
// what checks that code instead. The report keeps them apart from the equivalent ones.
var genericBelowPrecision = map[string]string{
	"layernorm_linear/_ln_bwd_tile const-x1.001: flat = 1.0 / tl.sqrt(tl.full([BLOCK_M], 0, tl.float32) + eps)": "a constant row's rstd 1/sqrt(eps) x1.001 scales its gradient by 0.1%, inside bfloat16's gradient noise; the mutation suite's bwd-flat-guard-dropped and the template's fp32 constant-row gradient cases hold the guard",
}

// genericExampleSurvivors lists, for runs with -generic.examples, survivors in codegen's
// generic examples' kernels that no case of theirs can kill, with the reason: below a
// bfloat16 example's precision, or code the example's cases cannot reach (a dtype branch it
// never takes, a sum over one group under the interpreter's constants), which other folders
// run and kill. Keyed as genericEquivalent; consulted only with -generic.examples (the
// examples of 2026-12-04's runs: layer_scale_residual, broadcast_mixed_sigmoid,
// clamp_mul_bias, addmm_sigmoid_channel; then the GEMM-headed ones, addmm_sigmoid_channel,
// linear_gt_gate, bmm_lt_gate, matmul_silu_scale, linear_gelu_scale_residual, linear_le_gate,
// linear_sub_mul_number_residual; then table_bf16's exact steps, whose constants the
// eager-rounding check could not tell apart), and not checked for staleness (another set of
// examples has other lines).
var genericExampleSurvivors = map[string]string{
	"generic/_fused_kernel const-x1.001: v0 = _clamp(x0, (-1.5), 2.0) #1":                                                                                           exBF16Clamp,
	"generic/_fused_kernel const-x1.001: v0 = _clamp(x0, (-1.5), 2.0) #2":                                                                                           exBF16Clamp,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (tl.where((x0 >= (-1.5)) & (x0 <= 2.0), 1.0, 0.0)) #1":                                                      exBF16Clamp,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (tl.where((x0 >= (-1.5)) & (x0 <= 2.0), 1.0, 0.0)) #2":                                                      exBF16Clamp,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (tl.where((x0 >= (-1.5)) & (x0 <= 2.0), 1.0, 0.0)) #3":                                                      exBF16Grad,
	"generic/_fused_kernel const-x1.001: v2 = v1 + x1 * 1.0":                                                                                                        "clamp_mul_bias (bf16): 0.1% of a bfloat16 operand added moves the bfloat16 output by at most one unit, inside the folder's tolerance",
	"generic/_fused_bwd_kernel const-x1.001: g0 = g1 * (3.0)":                                                                                                       exBF16Grad,
	"generic/_fused_bwd_kernel const-x1.001: g1 = g2 * (1.0)":                                                                                                       exBF16Grad + " (broadcast_mixed_sigmoid's, which feeds fp32 gradients, is killed)",
	"generic/_fused_bwd_kernel const-x1.001: gx1 = g2 * (1.0)":                                                                                                      exBF16Grad,
	"generic/_fused_bwd_kernel const-x1.001: gx2 = g1 * (1.0)":                                                                                                      "layer_scale_residual's residual is bf16, so is its gradient: " + exBF16Grad,
	"generic/_fused_bwd_kernel sum-max: tl.store(gbuf2 + pid, tl.sum(tl.sum(acc2, axis=1), axis=0)) #1":                                                             exGEMMOneRow,
	"generic/_fused_bwd_kernel sum-max: tl.store(gbuf1 + pid, tl.sum(tl.sum(acc1, axis=1), axis=0)) #1":                                                             exGEMMOneRow,
	"generic/_fused_bwd_kernel sum-max: tl.store(gbuf3 + pid, tl.sum(tl.sum(acc3, axis=1), axis=0)) #1":                                                             exGEMMOneRow,
	"generic/_sum_parts lt-le: mask=(grp < G)[:, None] & cm[None, :], other=0.0)":                                                                                   exSumParts,
	"generic/_fused_kernel const-x1.001: v0 = tl.where(x0 < 0.0999755859375, 1.0, 0.0) #2":                                                                          exFP16Gate,
	"generic/_fused_bwd_kernel const-x1.001: v0 = tl.where(x0 < 0.0999755859375, 1.0, 0.0) #2":                                                                      exFP16Gate,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = tl.where(x0 < 0.0999755859375, 1.0, 0.0) #2":                                                                  exFP16Gate,
	"generic/_fused_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #1":                                                                            exBF16Threshold,
	"generic/_fused_bwd_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #1":                                                                        exBF16Threshold,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #1":                                                                    exBF16Threshold,
	"generic/_fused_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #1":                                                                           exBF16Threshold,
	"generic/_fused_bwd_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #1":                                                                       exBF16Threshold,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #1":                                                                   exBF16Threshold,
	"generic/_fused_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #2":                                                                            exBF16Gate,
	"generic/_fused_bwd_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #2":                                                                        exBF16Gate,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = tl.where(x0 > 0.10009765625, 1.0, 0.0) #2":                                                                    exBF16Gate,
	"generic/_fused_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #2":                                                                           exBF16Gate,
	"generic/_fused_bwd_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #2":                                                                       exBF16Gate,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = tl.where(x0 <= 0.10009765625, 1.0, 0.0) #2":                                                                   exBF16Gate,
	"generic/_gelu_erf const-x1.001: return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)) #1":                                                               exBF16GELU,
	"generic/_gelu_erf const-x1.001: return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)) #3":                                                               exBF16GELU,
	"generic/_fused_kernel const-x1.001: v1 = v0 * 0.5":                                                                                                             exBF16GELU,
	"generic/_gemm_epilogue_kernel const-x1.001: v1 = v0 * 0.5":                                                                                                     exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: g0 = g1 * (0.5)":                                                                                                       exBF16GELU,
	"generic/_gemm_epilogue_kernel const-x1.001: v2 = v1 + x1 * 1.0":                                                                                                exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (0.5 * (1.0 + tl.math.erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * tl.exp(-0.5 * x0 * x0)) #1": exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (0.5 * (1.0 + tl.math.erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * tl.exp(-0.5 * x0 * x0)) #2": exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (0.5 * (1.0 + tl.math.erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * tl.exp(-0.5 * x0 * x0)) #3": exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (0.5 * (1.0 + tl.math.erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * tl.exp(-0.5 * x0 * x0)) #4": exBF16GELU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (0.5 * (1.0 + tl.math.erf(x0 * 0.7071067811865476)) + x0 * 0.3989422804014327 * tl.exp(-0.5 * x0 * x0)) #5": exBF16GELU,
	"generic/_fused_kernel const-x1.001: v0 = x0 - x1 * 1.0":                                                                                                        exFP16Alpha,
	"generic/_gemm_epilogue_kernel const-x1.001: v0 = x0 - x1 * 1.0":                                                                                                exFP16Alpha,
	"generic/_fused_kernel const-x1.001: v2 = v1 + x3 * 1.0":                                                                                                        exFP16Alpha,
	"generic/_gemm_epilogue_kernel const-x1.001: v2 = v1 + x3 * 1.0":                                                                                                exFP16Alpha,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (1.0)":                                                                                                      exFP16Alpha,
	"generic/_fused_bwd_kernel const-x1.001: gx3 = g2 * (1.0)":                                                                                                      exFP16Alpha,
	"generic/_sigmoid const-x1.001: return 1.0 / (1.0 + tl.exp(-x)) #1":                                                                                             exBF16SiLU,
	"generic/_sigmoid const-x1.001: return 1.0 / (1.0 + tl.exp(-x)) #2":                                                                                             exBF16SiLU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (_sigmoid(x0) * (1.0 + x0 * (1.0 - _sigmoid(x0)))) #1":                                                      exBF16SiLU,
	"generic/_fused_bwd_kernel const-x1.001: gx0 = g0 * (_sigmoid(x0) * (1.0 + x0 * (1.0 - _sigmoid(x0)))) #2":                                                      exBF16SiLU,
	"generic/_sum_parts lt-le: cm = cols < N":                                                                                                                       exSumParts,
	"generic/_sum_parts sum-max: total = tl.sum(acc, axis=0)":                                                                                                       exSumParts,
	"generic/_fused_kernel const-x1.001: v7 = x0 * 0.5":                                                                                                             exBF16Value,
	"generic/_fused_kernel const-x1.001: v9 = x0 / 0.5":                                                                                                             exBF16Value,
	"generic/_fused_kernel const-x1.001: v10 = tl.where(x0 == x1, 1.0, 0.0)":                                                                                        exBF16Value,
	"generic/_fused_kernel const-x1.001: v11 = tl.where(x0 == 0.5, 1.0, 0.0) #2":                                                                                    exBF16Value,
	"generic/_fused_kernel const-x1.001: v12 = tl.where(x0 != x1, 1.0, 0.0)":                                                                                        exBF16Value,
	"generic/_fused_kernel const-x1.001: v13 = tl.where(x0 != 0.5, 1.0, 0.0) #2":                                                                                    exBF16Value,
	"generic/_fused_kernel const-x1.001: v14 = tl.where(x0 < x1, 1.0, 0.0)":                                                                                         exBF16Value,
	"generic/_fused_kernel const-x1.001: v15 = tl.where(x0 < 0.5, 1.0, 0.0) #2":                                                                                     exBF16Value,
	"generic/_fused_kernel const-x1.001: v16 = tl.where(x0 <= x1, 1.0, 0.0)":                                                                                        exBF16Value,
	"generic/_fused_kernel const-x1.001: v17 = tl.where(x0 <= 0.5, 1.0, 0.0) #1":                                                                                    exBF16Bound,
	"generic/_fused_kernel const-x1.001: v17 = tl.where(x0 <= 0.5, 1.0, 0.0) #2":                                                                                    exBF16Value,
	"generic/_fused_kernel const-x1.001: v18 = tl.where(x0 > x1, 1.0, 0.0)":                                                                                         exBF16Value,
	"generic/_fused_kernel const-x1.001: v19 = tl.where(x0 > 0.5, 1.0, 0.0) #1":                                                                                     exBF16Bound,
	"generic/_fused_kernel const-x1.001: v19 = tl.where(x0 > 0.5, 1.0, 0.0) #2":                                                                                     exBF16Value,
	"generic/_fused_kernel const-x1.001: v20 = tl.where(x0 >= x1, 1.0, 0.0)":                                                                                        exBF16Value,
	"generic/_fused_kernel const-x1.001: v21 = tl.where(x0 >= 0.5, 1.0, 0.0) #2":                                                                                    exBF16Value,
	"generic/_fused_kernel const-x1.001: v23 = tl.where(x2 != 0.0, 1.5, x0)":                                                                                        exBF16Value,
	"generic/_fused_kernel const-x1.001: v24 = tl.where(x2 != 0.0, (-3.0), x0)":                                                                                     exBF16Value,
	"generic/_fused_kernel const-x1.001: v27 = _clamp(x0, (-0.5), 1.5) #1":                                                                                          exBF16Bound,
	"generic/_fused_kernel const-x1.001: v27 = _clamp(x0, (-0.5), 1.5) #2":                                                                                          exBF16Bound,
	"generic/_fused_kernel const-x1.001: v28 = _clamp_min(x0, 0.25)":                                                                                                exBF16Bound,
	"generic/_fused_kernel const-x1.001: v29 = _clamp_max(x0, (-0.25))":                                                                                             exBF16Bound,
	"generic/_fused_kernel const-x1.001: v30 = _clamp(x0, (-2.0), 2.0) #1":                                                                                          exBF16Bound,
	"generic/_fused_kernel const-x1.001: v30 = _clamp(x0, (-2.0), 2.0) #2":                                                                                          exBF16Bound,
	"generic/_fused_kernel lt-le: v34 = tl.where(x0 < 0.0, 0.0, x0)":                                                                                                exRelu0,
	"generic/_fused_bwd_kernel lt-le: v34 = tl.where(x0 < 0.0, 0.0, x0)":                                                                                            exRelu0,
}

const (
	exBF16Clamp     = "clamp_mul_bias (bf16): a clamp bound moved by 0.1% lies between two bfloat16 values (-1.5 and -1.508, 2.0 and 2.016), so no bfloat16 input tells it apart and the clamped value rounds back to the bound"
	exBF16Grad      = "clamp_mul_bias (bf16): a derivative scaled by 1.001 changes bfloat16 gradients by 0.1%, inside their rounding (0.4%)"
	exSumParts      = "clamp_mul_bias, addmm_sigmoid_channel and linear_gt_gate are rank 2: under the interpreter's constants their bias gets one program a column block (one group) or columns that fill whole blocks (96), so neither the column mask nor the sum over groups can show; the rank-3 and rank-4 trace folders, and the examples whose second input keeps a row dim (grad-bcast-*-row), kill both"
	exGEMMOneRow    = "a GEMM head's output is dense, so a broadcast input's one sum (a 0-dim input, a GEMM bias of one output column) is laid out one row a tile: the sum over the tile's rows is that row (the examples without a GEMM, whose inputs the verifier transposes, sum several rows and kill it: broadcast_mixed_sigmoid's slot 2)"
	exFP16Gate      = "bmm_lt_gate (fp16): the gate's 1.0 scaled by 1.001 moves a float16 output by 0.1%, inside the folder's tolerance (1e-2)"
	exBF16Gate      = "linear_gt_gate, linear_le_gate (bf16): the gate's 1.0 scaled by 1.001 moves a bfloat16 output by 0.1%, inside its rounding (0.4%)"
	exBF16Threshold = "linear_gt_gate, linear_le_gate (bf16): the threshold moved by 0.1% (0.10009765625 to 0.1001977) lies between two bfloat16 values (0.10009765625 and 0.1005859375), so no bfloat16 GEMM output tells the two comparisons apart; the planted case kills the lt-le mutant at the same line"
	exBF16GELU      = "linear_gelu_scale_residual (bf16): a GELU constant, its derivative's, or a residual's 1.0 scaled by 1.001 moves a bfloat16 value by at most 0.1%, inside its rounding (0.4%)"
	exFP16Alpha     = "linear_sub_mul_number_residual (fp16): an alpha of 1.0, or its derivative, scaled by 1.001 moves a float16 value by 0.1% of one operand, inside the folder's tolerance (1e-2)"
	exBF16Value     = "table_bf16: a constant whose step's result is a bfloat16 value (x0 * 0.5, x0 / 0.5, a where's 1.5 or -3.0, a comparison's 1.0): scaled by 1.001 it moves the value by 0.1%, less than half a bfloat16 unit (0.39%), so it rounds back to the same value for every input: equivalent at bfloat16"
	exBF16Bound     = "table_bf16: a clamp bound or a comparison's threshold (0.5, 0.25, 1.5, 2.0) scaled by 1.001 lies between two adjacent bfloat16 values, so no bfloat16 input falls between the two bounds: equivalent at bfloat16"
	exRelu0         = "relu's tl.where(x0 < 0.0, 0.0, x0) as <= differs only at x0 = -0.0 (0.0 in place of -0.0), which compare equal; its derivative reads the result (y > 0), the same"
	exBF16SiLU      = "matmul_silu_scale (bf16): a sigmoid constant or SiLU's derivative's scaled by 1.001 moves a bfloat16 value by at most 0.1%, inside its rounding (0.4%); addmm_sigmoid_channel (fp32) kills them"
)

const (
	eqLoop     = "one more iteration only when start == N, with every lane masked: loads give other (0, or -inf scores), sums and running maxima are unchanged, stores are masked"
	eqLoadPast = "the element read one past the end reaches only the output row/column that the store masks (the interpreter does not fault on the read)"
	eqSafe     = "differs only for a fully masked row (mx = -inf), which is NaN either way, as in eager"
	eqTileLoop = "one more tile only when r == end (the interpreter's loop; the GPU's is a tl.range): every row of it is masked (rows < end) in the tile function, which returns 0 there, so nothing is loaded, stored or summed"
	eqSumParts = "one more block only when g == G: every group of it is masked (grp < G), loads give 0"
	eqDQRow    = "in the dQ kernel a row's values reach only that row's dQ (dS row times K), whose store masks rows past Sq: the value loaded for row Sq, or the other= of rows past it, is never stored"
	eqKeyBlock = "one more key block only when n0 == hi: its keys are past Sk (the edge tile's -inf, K and V loaded as 0) or past every row's causal limit (the fill; a row reaching there has a larger max, so exp gives 0): P = 0, the running max, sum and output unchanged"
	eqPastSq   = "rows past Sq load q, dO and delta as 0 (the io_mask and delta loads keep rows < Sq), so their dS = P (dP - delta) is 0 and P dO is 0 whatever their P, as long as P is finite: dK, dV, the bias gradient and the stored dS are unchanged"
	eqTol      = "within the GEMM patterns' fp32 tolerance (atol = rtol = 1e-4) for every x (numpy over [-12, 12]: max |dy| "
)

// TestGenericSitesFind checks the site finder on a small source (no Python).
func TestGenericSitesFind(t *testing.T) {
	src := "import triton\n\n@triton.jit\ndef _k(X, N, eps, BLOCK: tl.constexpr):\n" +
		"    \"\"\"doc: x < N and tl.sum(\n    more doc\"\"\"\n" +
		"    m = cols < N  # a < b\n    s = tl.sum(x, axis=0) / N + eps\n" +
		"    rstd = 1.0 / tl.sqrt(s)\n    f = tl.where(m, x, float(\"-inf\"))\n    a = x << 1\n\n\n" +
		"def host(x):\n    return x < 2.5\n"
	var got []string
	for _, s := range genericSites(src) {
		got = append(got, s.Op+"|"+s.Key)
	}
	want := []string{
		"lt-le|_k lt-le: m = cols < N",
		"sum-max|_k sum-max: s = tl.sum(x, axis=0) / N + eps",
		"eps-dropped|_k eps-dropped: s = tl.sum(x, axis=0) / N + eps",
		"div-n1|_k div-n1: s = tl.sum(x, axis=0) / N + eps",
		"const-x1.001|_k const-x1.001: rstd = 1.0 / tl.sqrt(s)",
		"rstd-x1.01|_k rstd-x1.01: rstd = 1.0 / tl.sqrt(s)",
		"neginf-zero|_k neginf-zero: f = tl.where(m, x, float(\"-inf\"))",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sites:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, s := range genericSites(src) {
		if s.Op == "rstd-x1.01" && !strings.Contains(s.Src, "rstd = (1.0 / tl.sqrt(s)) * 1.01\n") {
			t.Errorf("rstd edit: %q", s.Src)
		}
	}
}

// TestGenericMutants (opt-in: -generic) generates the kernel folders of three shared
// training traces and, for each distinct kernel.py, applies every generic operator
// (genericOps) at every site in its @triton.jit functions, then verifies each mutant with
// its folder's cases (FailFast, one trial, forked runners, as TestMutations): a mutant is
// killed when a case the unmutated folder passes fails. A survivor fails the test unless
// genericEquivalent lists it.
func TestGenericMutants(t *testing.T) {
	if !*genericFlag {
		t.Skip("opt-in: go test ./verify -run TestGenericMutants -generic -v")
	}
	py := venv(t)
	var traces []string
	for _, tr := range genericTraces {
		traces = append(traces, shared.Require(t, tr))
	}
	start := time.Now()
	root := t.TempDir()
	bin := filepath.Join(root, "fuseadvise")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fuseadvise")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var dirs []string
	for _, tr := range traces {
		o := filepath.Join(root, strings.TrimSuffix(filepath.Base(tr), ".json.gz"))
		out, err := exec.Command(bin, "gen", "-o", o, tr).Output()
		if err != nil {
			t.Fatalf("gen %s: %v", tr, err)
		}
		dirs = append(dirs, strings.Fields(string(out))...)
	}
	// -generic.examples: codegen's generic examples too (paths the traces' programs do not
	// take: other op codes, GEMM heads, broadcast inputs of every kind), as generic folders
	if *genericExamples != "" {
		var names []string
		if *genericExamples != "all" {
			names = strings.Split(*genericExamples, ",")
		}
		for name, d := range writeGenericExamples(t, names...) {
			g := filepath.Join(root, "examples", "generic-"+name)
			if err := os.MkdirAll(filepath.Dir(g), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(d, g); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, g)
		}
	}
	sort.Strings(dirs)
	var shard []string // -generic.pattern: these patterns' folders only
	if *genericPattern != "" {
		shard = strings.Split(*genericPattern, ",")
		dirs = slices.DeleteFunc(dirs, func(d string) bool {
			p, _, _ := strings.Cut(filepath.Base(d), "-")
			return !slices.Contains(shard, p)
		})
		if len(dirs) == 0 {
			t.Fatalf("-generic.pattern %s: no folder of these patterns", *genericPattern)
		}
	}
	// the folders of each distinct kernel.py (sorted by path)
	type kernel struct {
		pattern, src string
		dirs         []string
	}
	var kernels []*kernel
	byHash := map[[32]byte]*kernel{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "kernel.py"))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if k := byHash[h]; k != nil {
			k.dirs = append(k.dirs, d)
			continue
		}
		p, _, _ := strings.Cut(filepath.Base(d), "-")
		k := &kernel{p, string(b), []string{d}}
		byHash[h] = k
		kernels = append(kernels, k)
	}
	// then the mutation suite's folders (specs and variants) that carry one of these kernels:
	// code a trace's folders never run (a causal mask, a learned bias's gradient, dropout) runs
	// in one of them, so a mutant there is tried where its code runs
	nTrace := len(dirs)
	suite := genFolders(t)
	for _, key := range slices.Sorted(maps.Keys(suite)) {
		b, err := os.ReadFile(filepath.Join(suite[key], "kernel.py"))
		if err != nil {
			t.Fatal(err)
		}
		if k := byHash[sha256.Sum256(b)]; k != nil {
			k.dirs = append(k.dirs, suite[key])
			dirs = append(dirs, suite[key])
		}
	}
	t.Logf("%d folders from %d traces and %d of the mutation suite's, %d distinct kernels", nTrace, len(traces), len(dirs)-nTrace, len(kernels))

	// baseline: each folder's cases, and those it fails (skipped for its mutants)
	res, err := Run(context.Background(), dirs, Options{Python: py, Trials: 2, Jobs: runtime.GOMAXPROCS(0)})
	if err != nil {
		t.Fatal(err)
	}
	plan := map[string][]string{}
	baseFail := map[string][]string{}
	for _, f := range res.Folders {
		if f.Error != "" {
			t.Fatalf("%s: the unmutated folder does not load: %s", f.Dir, f.Error)
		}
		for _, c := range f.Cases {
			plan[f.Dir] = append(plan[f.Dir], c.ID)
			if !c.Passed() {
				baseFail[f.Dir] = append(baseFail[f.Dir], c.ID)
				t.Logf("baseline: %s %s fails unmutated; skipped for its mutants", filepath.Base(f.Dir), c.ID)
			}
		}
	}
	t.Logf("baseline: %d folders, %.1fs", len(dirs), res.Seconds)

	// mutants: each is verified with the first folder of its kernel, and while it survives,
	// with the next (a kernel shared by folders of other shapes, dtypes and parameters)
	type gmut struct {
		*mutant
		k   *kernel
		src string
	}
	var gms []*gmut
	var muts []*mutant
	for _, k := range kernels {
		for _, s := range genericSites(k.src) {
			mu := &mutant{m: mutation{Pattern: k.pattern, Name: s.Key, Class: s.Op}, tried: map[string]bool{}}
			gms = append(gms, &gmut{mu, k, s.Src})
			muts = append(muts, mu)
		}
	}
	opts := Options{Python: py, Trials: 1, Timeout: 90 * time.Second, Jobs: runtime.GOMAXPROCS(0), FailFast: true}
	if *mutFork {
		opts.Runner = newForkRunner(t, py)
	}
	// per folder, stage 1: the cases that killed the hand-written mutants of the pattern
	// (the suite's kill hints); stage 2: every other case the unmutated folder passes
	hints, err := readHints(hintsFile)
	if err != nil {
		t.Fatal(err)
	}
	killers := map[string][]string{}
	for k, id := range hints {
		p, _, _ := strings.Cut(k, "/")
		if !slices.Contains(killers[p], id) {
			killers[p] = append(killers[p], id)
		}
	}
	baseOf := map[*mutant]string{}
	killedIn := map[*mutant]string{}
	var walls []string
	for j := 0; ; j++ {
		var round []*gmut
		for i, g := range gms {
			if g.killedBy != "" || j >= len(g.k.dirs) {
				continue
			}
			g.dir = filepath.Join(root, "mutants", fmt.Sprintf("%03d-%d", i, j))
			if err := copyDir(g.k.dirs[j], g.dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(g.dir, "kernel.py"), []byte(g.src), 0o644); err != nil {
				t.Fatal(err)
			}
			baseOf[g.mutant] = g.k.dirs[j]
			g.tried = map[string]bool{}
			round = append(round, g)
		}
		if len(round) == 0 {
			break
		}
		for n := 1; n <= 2; n++ {
			var alive []*mutant
			for _, g := range round {
				mu := g.mutant
				if mu.killedBy != "" {
					continue
				}
				mu.next = nil
				if n == 1 {
					for _, id := range killers[mu.m.Pattern] {
						if slices.Contains(plan[baseOf[mu]], id) && !slices.Contains(baseFail[baseOf[mu]], id) {
							mu.next = append(mu.next, id)
						}
					}
					if len(mu.next) == 0 {
						continue
					}
				}
				alive = append(alive, mu)
			}
			w := runMutants(t, alive, opts, func(mu *mutant) []string {
				if n == 1 {
					return slices.DeleteFunc(slices.Clone(plan[baseOf[mu]]), func(id string) bool { return slices.Contains(mu.next, id) })
				}
				skip := slices.Clone(baseFail[baseOf[mu]])
				for id := range mu.tried {
					skip = append(skip, id)
				}
				return skip
			})
			for _, mu := range alive {
				for _, id := range mu.next {
					mu.tried[id] = true
				}
				if mu.killedBy != "" && killedIn[mu] == "" {
					killedIn[mu] = filepath.Base(baseOf[mu])
				}
			}
			walls = append(walls, fmt.Sprintf("folder %d stage %d: %d run, %.1fs", j+1, n, len(alive), w.Seconds()))
		}
	}

	// report
	type tally struct{ sites, killed, equiv, below int }
	per := map[string]*tally{}
	var report strings.Builder
	fmt.Fprintf(&report, "| pattern | mutant | killed by | in folder |\n|---|---|---|---|\n")
	var failed []string
	survived := map[string]bool{} // a key can name sites of several kernels (the same line)
	for _, mu := range muts {
		if mu.killedBy == "" {
			survived[mu.m.Pattern+"/"+mu.m.Name] = true
		}
	}
	for _, mu := range muts {
		op := mu.m.Class
		if per[op] == nil {
			per[op] = &tally{}
		}
		per[op].sites++
		key := mu.m.Pattern + "/" + mu.m.Name
		by := mu.killedBy
		if by != "" {
			per[op].killed++
			if _, ok := genericEquivalent[key]; ok && !survived[key] {
				t.Logf("%s is listed as equivalent but was killed by %s: remove it", key, by)
			}
			if _, ok := genericBelowPrecision[key]; ok && !survived[key] {
				t.Logf("%s is listed as below the folders' precision but was killed by %s: remove it", key, by)
			}
		} else if why, ok := genericEquivalent[key]; ok {
			per[op].equiv++
			by = "survived, equivalent: " + why
		} else if why, ok := genericBelowPrecision[key]; ok {
			per[op].below++
			by = "survived, not equivalent but below the folders' precision: " + why
		} else if why, ok := genericExampleSurvivors[key]; ok && *genericExamples != "" {
			per[op].below++
			by = "survived, listed for the examples: " + why
		} else {
			by = "SURVIVED"
			failed = append(failed, key)
		}
		fmt.Fprintf(&report, "| %s | `%s` | %s | %s |\n", mu.m.Pattern, mu.m.Name, by, killedIn[mu])
	}
	var ops []string
	killed, equiv, below := 0, 0, 0
	for _, op := range genericOps {
		if c := per[op.Name]; c != nil {
			ops = append(ops, fmt.Sprintf("%s %d/%d killed (%d equivalent, %d below precision)", op.Name, c.killed, c.sites, c.equiv, c.below))
			killed += c.killed
			equiv += c.equiv
			below += c.below
		}
	}
	t.Logf("generic mutants: %d of %d killed, %d equivalent, %d below the folders' precision, %d survivors not listed, in %.1fs (%s)\nper operator: %s\n%s",
		killed, len(muts), equiv, below, len(failed), time.Since(start).Seconds(), strings.Join(walls, "; "),
		strings.Join(ops, "; "), report.String())
	have := map[string]bool{}
	for _, mu := range muts {
		have[mu.m.Pattern+"/"+mu.m.Name] = true
	}
	for _, k := range slices.Concat(slices.Collect(maps.Keys(genericEquivalent)), slices.Collect(maps.Keys(genericBelowPrecision))) {
		p, _, _ := strings.Cut(k, "/")
		if shard != nil && !slices.Contains(shard, p) {
			continue // other patterns' kernels were not mutated
		}
		if !have[k] {
			t.Errorf("genericEquivalent or genericBelowPrecision lists %s, which is no mutant any more (the kernel changed): update or remove it", k)
		}
	}
	for _, k := range failed {
		t.Errorf("generic mutant %s survived every case: add a case that kills it, or list it in genericEquivalent (or genericBelowPrecision) with the reason", k)
	}
}
