package patterns

// The registry: one declaration per pattern, read by every stage that needs to know
// something about a pattern (detection, cost model and advice here; folders and their
// parameters in codegen; predictions in bench; targets in report). What one adds for a new
// pattern, and what the registry tests check, is in docs/adding-a-pattern.md.

// Kind is the shape of a pattern's fused kernel.
type Kind string

const (
	KindPointwise Kind = "pointwise" // one pass over elements, no reduction
	KindRow       Kind = "row"       // a reduction over the last dim (a norm, a softmax) and a pass over the row
	KindGEMM      Kind = "gemm"      // a GEMM fused with the chain around it (GEMMForm says how)
	KindAttention Kind = "attention" // a fused attention (scores, softmax and the second GEMM in one kernel)
)

// Kinds lists the kinds, in the order the docs give them.
var Kinds = []Kind{KindPointwise, KindRow, KindGEMM, KindAttention}

// GEMMForm says how a GEMM pattern's fused form keeps its GEMM (KindGEMM only).
type GEMMForm string

const (
	// GEMMEpilogue: the chain runs in the GEMM's epilogue and launches nothing of its own;
	// fusion adds one pass of arithmetic over the GEMM output (linear_gelu).
	GEMMEpilogue GEMMForm = "epilogue"
	// GEMMStats: a row-statistics kernel reads the GEMM's input before the GEMM, which
	// applies them on load or in its epilogue (layernorm_linear).
	GEMMStats GEMMForm = "stats"
)

// Pattern is one entry of the catalog: the chain it matches (Chain, Anchors, the matcher,
// Refuses), the kernel that replaces it (Kind, Fused, Template, Params, the mapping of a shape
// group to a kernel case, Usage) and what to tell the user (Advice).
type Pattern struct {
	ID   string // contract id (patterns.md): never rename
	Kind Kind
	// GEMM says how a KindGEMM pattern keeps its GEMM; "" for the other kinds.
	GEMM GEMMForm
	// Outputs is the number of tensors of the main input's size the fused kernel writes
	// (add_layernorm: the sum and y); 0 means 1.
	Outputs int
	// ReducesRows: the forward writes no tensor of the main input's size, only a number or
	// one a row (a loss); OutputCount is 0.
	ReducesRows bool
	Chain       string   // the forward chain, in words
	Anchors     []string // node base names a match starts from
	Fused       string   // what one fused kernel does
	Advice      string   // what to do about it: always printed with an opportunity
	Refuses     string   // what looks similar but is not an instance, and why
	// Template is the folder under templates/ holding kernel.py, reference.py, adapter.py
	// and test_kernel.py.
	Template string
	// Params is the kernel's parameter schema: the entries of case.py's PARAMS, with the
	// values each allows and its default. codegen writes them in the order of KernelParamNames.
	Params []Param
	// ForwardOnly: the kernel has no backward (its module runs the eager chain when autograd
	// needs a graph), so an instance with a backward in the trace (a training step) saves
	// nothing and is not counted (adapter.py's has_backward says the same: the registry test
	// checks it).
	ForwardOnly bool
	// SlowerInTraining, when set, says why the fused forward+backward was measured no faster
	// than eager's (docs/benchmarks/h200.md, "Training modes"): an instance with a backward
	// in the trace is counted with no saving, as for ForwardOnly, and a note says why.
	SlowerInTraining string
	// SumsGEMMBias: the fused backward sums the GEMM's bias gradient in its own pass (a
	// GEMM pattern), so the GEMM backward's memory-bound kernels (eager's row sum of the
	// output gradient, under AddmmBackward0) are the chain's to claim in the coverage.
	SumsGEMMBias bool
	// CastsOutput: the template writes its output (the value of the instance's last op) in the
	// type its out_dtype parameter names, so where that value's one reader is a GEMM that
	// casts it under autocast (aten::to in aten::linear) the instance takes the cast
	// (takeOutputCasts): out_dtype becomes the cast's type, and the cast's kernels and its
	// ToCopyBackward0 are the instance's. The pattern takes out_dtype (the registry test
	// checks it).
	CastsOutput bool
	// TakesGEMMCasts: the fused kernel computes the GEMMs' activation itself (layernorm_linear:
	// the norm's output is never written), so autocast's cast of that activation nested in
	// each of the instance's GEMMs, and the cast's ToCopyBackward0, are the instance's in the
	// coverage (chainKernels; the instance's traced time counts them already: they are in its
	// GEMM ops' subtrees and their backward nodes).
	TakesGEMMCasts bool
	// eagerBackward, when set, says whether an instance's backward runs eager's ops in the
	// template (add_layernorm's with a broadcast residual: ATen's LayerNorm backward and a sum
	// of the residual's gradient): its backward is counted at its traced time, no saving.
	eagerBackward func(in *Instance) bool
	// BackwardAsEager, when set, says why an instance's backward in a training trace is
	// counted at its traced time (no backward saving) although the kernel trains: its
	// forward's saving is counted, and a note says why.
	BackwardAsEager string
	// Usage is the README's swap-in snippet: static Python, no data from the trace. It
	// imports the kernel from UsageModule, which codegen replaces with the kernel's own module
	// name (several kernels copied beside one model must not all be "kernel").
	Usage string

	match func(g *graph, n int32) (*Instance, bool)
	// toCase fills c's shapes and parameters from a shape group (c.Dtype holds the group's
	// kernel dtype and may be changed) or returns why the group cannot be generated.
	toCase func(g ShapeGroup, c *Case) string
	// assume names the parameters the trace did not record, whose defaults the case uses.
	assume func(g ShapeGroup) []string
	// note says what a group's folder must tell beside the usage snippet (how to hand the
	// kernel what the traced code computed elsewhere); nil for nothing.
	note func(g ShapeGroup) []string
	// check validates a case beyond its parameters (shape structure the kernel needs).
	check func(c Case) error
	// advise adds advice that depends on the opportunity (after Advice).
	advise func(o *Opportunity) []string
}

// UsageModule stands for the kernel's module name in Usage.
const UsageModule = "{module}"

// asLinear is the part of the GEMM patterns' snippets that takes the module the trace ran:
// an nn.Linear, or Hugging Face's Conv1D (GPT-2 and the models built on its code), which computes
// x @ weight + bias with weight [in, out] and has no in_features.
const asLinear = `

class Conv1DAsLinear(torch.nn.Module):
    """Hugging Face's Conv1D (y = x @ weight + bias, weight [in, out]) seen as an nn.Linear
    (weight [out, in]): the same parameters, the weight a transposed view read on each use."""

    def __init__(self, conv):
        super().__init__()
        self.conv = conv
        self.in_features, self.out_features = conv.weight.shape

    @property
    def weight(self):
        return self.conv.weight.t()

    @property
    def bias(self):
        return self.conv.bias

    def forward(self, x):
        return self.conv(x)


def as_linear(m):
    if isinstance(m, torch.nn.Linear):
        return m
    if type(m).__name__ == "Conv1D" and m.weight.dim() == 2:
        return Conv1DAsLinear(m)
    raise TypeError(f"want an nn.Linear or Hugging Face's Conv1D, got {type(m).__name__}")


`

// Catalog returns the patterns, in report order.
func Catalog() []*Pattern { return catalog }

// Lookup returns the pattern with id.
func Lookup(id string) (*Pattern, bool) {
	for _, p := range catalog {
		if p.ID == id {
			return p, true
		}
	}
	return nil, false
}

// IsGEMM reports whether pattern id is registered with a fused kernel that contains a GEMM.
func IsGEMM(id string) bool {
	p, ok := Lookup(id)
	return ok && p.Kind == KindGEMM
}

// RowKernel reports whether the fused form runs a row reduction: a norm or softmax, or a
// GEMM pattern's stats pass (a load, a reduction and a dependent pass over the row).
func (p *Pattern) RowKernel() bool { return p.Kind == KindRow || p.GEMM == GEMMStats }

// OutputCount is Outputs with its default applied: 0 for a pattern that ReducesRows.
func (p *Pattern) OutputCount() int {
	if p.ReducesRows {
		return 0
	}
	return max(p.Outputs, 1)
}

var catalog = []*Pattern{
	{
		ID:       "bias_gelu",
		Kind:     KindPointwise,
		Chain:    "add (bias [N], broadcast over the last dim) -> gelu",
		Anchors:  []string{"gelu", "gelu_"},
		Fused:    "one pointwise kernel: y = gelu(x + b)",
		Advice:   "fold the bias into the preceding GEMM (nn.Linear / torch.addmm) or fuse bias+GELU into one kernel",
		Refuses:  "an add of two full tensors (a residual, not a bias); a gelu whose input comes from a GEMM with the bias inside (that is linear_gelu)",
		Template: "bias_gelu",
		Params:   []Param{paramApproximate, paramHasBias},
		Usage:    "from {module} import BiasGELU\ny = BiasGELU(approximate)(x, bias)        # was F.gelu(x + bias, approximate=...)",
		match:    matchBiasGelu,
		toCase:   caseBiasGelu,
	},
	{
		ID:           "linear_gelu",
		Kind:         KindGEMM,
		GEMM:         GEMMEpilogue,
		Chain:        "linear / addmm (bias inside the GEMM) -> gelu",
		Anchors:      []string{"gelu", "gelu_"},
		Fused:        "GEMM with a bias+GELU epilogue (or one pointwise kernel after a cuBLAS GEMM)",
		Advice:       "use a GEMM with a GELU epilogue (cuBLASLt epilogue, torch._addmm_activation, or a Triton GEMM)",
		Refuses:      "a matmul/mm without bias followed by an add (that is bias_gelu); a gelu on a value no GEMM produced",
		Template:     "linear_gelu",
		Params:       []Param{paramApproximate, paramHasBias},
		SumsGEMMBias: true,
		Usage:        "import torch\nfrom {module} import LinearGELU\n" + asLinear + "# after the model is loaded and on its device (a Conv1D's weight is viewed once, here)\nlayer = LinearGELU.from_linear(as_linear(linear), approximate)  # was F.gelu(linear(x))\ny = layer(x)",
		match:        matchLinearGelu,
		toCase:       caseLinearGelu,
		check:        checkGEMMShapes,
	},
	{
		ID:       "gelu_pyops",
		Kind:     KindPointwise,
		Chain:    "tanh-GELU written as ops: pow/mul -> mul -> add -> mul -> tanh -> add -> mul (-> mul)",
		Anchors:  []string{"tanh"},
		Fused:    "one pointwise kernel",
		Advice:   `replace the Python tanh-GELU with F.gelu(x, approximate="tanh") (one kernel), e.g. nn.GELU(approximate="tanh")`,
		Refuses:  "a tanh without a cubic term on the same tensor (LSTM gates, mish); runs of fewer than 6 or more than 9 ops",
		Template: "gelu_pyops",
		Params:   []Param{paramHasBias, paramOutDtype},
		Usage: "from {module} import NewGELU\ny = NewGELU()(x)                         # was HF NewGELUActivation / 0.5*x*(1+tanh(...))\n" +
			"# y in eager's type (fp32 under CUDA autocast); under autocast with no out_dtype in case.py (y's one reader,\n" +
			"# a GEMM, casts it back): NewGELU(torch.bfloat16), the autocast dtype, writes that cast",
		match:  matchGeluPyops,
		toCase: caseGeluPyops,
		// y in x's type (NewGELU's), not autocast's fp32, where one GEMM reads it (c_proj)
		CastsOutput: true,
	},
	{
		ID:       "mask_softmax",
		Kind:     KindRow,
		Chain:    "(scale: mul/div) -> mask or bias (masked_fill / where / add) -> softmax",
		Anchors:  []string{"softmax", "_softmax", "_safe_softmax"},
		Fused:    "one row-wise kernel: softmax(scale * x masked)",
		Advice:   "fuse scale+mask+softmax into one row-wise kernel",
		Refuses:  "a softmax whose input is not produced by a mask op; an add whose other operand does not broadcast along the softmax rows; a subtracted mask or an add with alpha != 1 (the kernel adds the mask)",
		Template: "mask_softmax",
		Params:   []Param{paramMaskKind, paramMaskFill, paramScale, paramP, paramMaskDtype, paramOutDtype},
		Usage:    "from {module} import MaskSoftmax\ny = MaskSoftmax(scale=..., mask_kind=..., p=...)(scores, mask)  # was softmax(masked_fill(scores*scale, mask, fill))",
		match:    matchMaskSoftmax,
		toCase:   caseMaskSoftmax,
		assume:   assumeMaskSoftmax,
		advise:   adviseAttention,
	},
	{
		ID:   "attention",
		Kind: KindAttention,
		Chain: "matmul / bmm / baddbmm (Q·Kᵀ, heads split by views) -> (scale: mul/div by a scalar, or baddbmm's alpha) -> " +
			"(mask: masked_fill / where / add / sub; bias: add of a relative-position bias, ALiBi, or a padding mask after the mask) -> softmax over the keys (autocast's fp32 upcast) -> " +
			"(dropout) -> matmul / bmm (·V)",
		Anchors:  []string{"softmax", "_softmax", "_safe_softmax"},
		Fused:    "one flash-attention kernel: online softmax over key blocks, no Sq x Sk tensor in memory; causal masks and ALiBi computed in the kernel, dropout regenerated from its seed in the backward",
		Advice:   "fuse the whole attention chain so the scores never reach memory: F.scaled_dot_product_attention or FlexAttention where they express it, else the generated flash-style kernel",
		Refuses:  "a chain without both GEMMs (mask_softmax covers those); a softmax not over the key dim; an op between that is not a scale, mask, bias, view, cast or dropout (tanh soft-capping, a head-mask multiply, m - scores); two biases, three masks, or two masks other than a padding mask added after the first (it becomes the bias); a padding mask added before a mask filled with a finite value, or a bias before a mask filled with a number other than finfo.min (fully masked rows would differ); a mask or bias before the scale; probabilities read by anything but the ·V GEMM (output_attentions)",
		Template: "attention",
		Params:   []Param{paramMaskKind, paramMaskFill, paramScale, paramP, paramBiasKind, paramMaskDtype},
		Usage: "from {module} import Attention\n" +
			"attn = Attention(scale=..., mask_kind=..., mask_fill=..., bias_kind=..., p=...)\n" +
			"out = attn(q, k, v, mask, bias)  # was dropout(softmax(q @ k.transpose(-1, -2) * scale + mask + bias), p) @ v",
		match:  matchAttention,
		toCase: caseAttention,
		assume: assumeAttention,
		check:  checkAttention,
		advise: adviseAttentionCall,
	},
	{
		ID:       "layernorm_linear",
		Kind:     KindGEMM,
		GEMM:     GEMMStats,
		Chain:    "layer_norm -> one or more linear / addmm / mm / matmul reading its output",
		Anchors:  []string{"layer_norm", "native_layer_norm"},
		Fused:    "LayerNorm folded into the GEMM (gamma/beta folded into the weights, row stats, a row-wise epilogue)",
		Advice:   "fold LayerNorm into the following GEMM: gamma/beta into the weights once, mean/rstd applied in the GEMM's epilogue",
		Refuses:  "a LayerNorm whose output goes through a dropout that runs, or any other op, before the GEMM",
		Template: "layernorm_linear",
		BackwardAsEager: "its backward runs eager's two cuBLAS GEMMs and replaces only the LayerNorm's backward and the bias gradient's row sum; measured on an H200 at " +
			"1.03-1.20x eager's backward (docs/benchmarks/h200.md, \"layernorm_linear in training\"), where the cost model's backward " +
			"was 9% over to 41% under the measured time",
		// the bias gradient by _col_sums (two launches of its own), not ATen's row sum
		SumsGEMMBias: true,
		// the GEMM reads the LayerNorm's input (the fold) or its output made in the kernel in
		// the GEMM's type: autocast's cast of the fp32 norm output, and its gradient's cast
		// back, never run
		TakesGEMMCasts: true,
		Params:         []Param{paramHasBias, paramEps(1e-5), paramConvBias},
		advise:         adviseLayerNormLinear,
		note:           noteLayerNormLinear,
		Usage:          "import torch\nfrom {module} import LayerNormLinear\n" + asLinear + "layer = LayerNormLinear.from_modules(layer_norm, as_linear(linear))  # was linear(layer_norm(x))\ny = layer(x)",
		match:          matchLayerNormLinear,
		toCase:         caseLayerNormLinear,
		assume:         assumeLayerNormLinear,
		check:          checkGEMMShapes,
	},
	{
		ID:       "add_layernorm",
		Kind:     KindRow,
		Outputs:  2, // the sum and y
		Chain:    "residual add -> layer_norm",
		Anchors:  []string{"layer_norm", "native_layer_norm"},
		Fused:    "one kernel writing the sum (still needed by the residual) and the normalized output",
		Advice:   "fuse the residual add into the LayerNorm kernel (Apex FusedLayerNorm-style add+norm)",
		Refuses:  "an add with a scalar (not a residual)",
		Template: "add_layernorm",
		Params:   []Param{paramEps(1e-5), paramResidualDtype, paramNormDim, paramOutDtype, paramConvBias},
		advise:   adviseAddLayerNorm,
		note:     noteAddLayerNorm,
		Usage: "from {module} import AddLayerNorm\ns, y = AddLayerNorm.from_layer_norm(layer_norm)(x, residual)  # was s = x + residual; y = layer_norm(s)\n" +
			"# out_dtype in case.py (y read by one GEMM that autocast casts it for): from_layer_norm(layer_norm, y_dtype=torch.bfloat16)",
		CastsOutput: true,
		// a residual that broadcasts other than as one vector of the normalized dim (position
		// embeddings; a convolution's bias is such a vector: the one-pass backward sums its
		// gradient): the template's backward is ATen's LayerNorm backward and the residual's sum
		eagerBackward: func(in *Instance) bool {
			return len(in.Dims) > 1 && numel(in.Dims[1]) < numel(in.Dims[0]) && numel(in.Dims[1]) != in.Cols
		},
		match:  matchAddLayerNorm,
		toCase: caseAddLayerNorm,
		assume: assumeEps("1e-5"),
		check:  checkResidualBroadcast,
	},
	{
		ID:       "dropout_add",
		Kind:     KindPointwise,
		Chain:    "dropout that runs (training, p > 0) -> residual add",
		Anchors:  []string{"dropout", "native_dropout", "feature_dropout"},
		Fused:    "one kernel: y = r + dropout(x)",
		Advice:   "fuse dropout with the residual add (one kernel, mask generated in-kernel)",
		Refuses:  "a dropout that does not run (eval mode or p = 0: aten::dropout returns its input)",
		Template: "dropout_add",
		Params:   []Param{paramHasBias, paramGEMMBias, paramP, paramResidualDtype},
		Usage:    "from {module} import DropoutAdd\ny = DropoutAdd(p)(x, residual, bias)     # was residual + dropout(x + bias, p)",
		match:    matchDropoutAdd,
		toCase:   caseDropoutAdd,
		assume:   assumeDropoutAdd,
		advise:   adviseDropoutAdd,
		note:     noteDropoutAdd,
	},
	{
		ID:       "rmsnorm_pyops",
		Kind:     KindRow,
		Chain:    "RMSNorm written as ops: pow -> mean -> add (eps) -> rsqrt -> mul -> (to) -> mul (weight)",
		Anchors:  []string{"rsqrt"},
		Fused:    "one row-wise kernel",
		Advice:   "replace the Python RMSNorm with F.rms_norm / nn.RMSNorm (one fused kernel)",
		Refuses:  "an rsqrt not fed by mean(x^2) over the last dim, or whose result does not scale the same x",
		Template: "rmsnorm_pyops",
		Params:   []Param{paramEps(1e-6), paramCasting, paramOutDtype},
		Usage:    "from {module} import RMSNorm\nnorm = RMSNorm.from_module(llama_rms_norm)  # was LlamaRMSNorm\ny = norm(x)",
		advise:   adviseRMSNorm,
		note:     noteRMSNorm,
		match:    matchRMSNormPyops,
		toCase:   caseRMSNormPyops,
		assume:   assumeEps("1e-6"),
		// y in the GEMMs' 16-bit type where autocast casts it for each of them (Llama's q, k,
		// v and gate, up projections)
		CastsOutput: true,
	},
	{
		ID:       "swiglu",
		Kind:     KindPointwise,
		Chain:    "silu(gate) consumed by mul with up",
		Anchors:  []string{"silu", "silu_"},
		Fused:    "one pointwise kernel (or a GEMM epilogue on the gate/up projection)",
		Advice:   "fuse silu(gate) * up into one kernel (or into the gate/up GEMM epilogue)",
		Refuses:  "a silu multiplied by a scalar or by a tensor of another shape",
		Template: "swiglu",
		Params:   nil, // the kernel takes no parameter
		Usage:    "from {module} import SwiGLU\ny = SwiGLU()(gate, up)                   # was F.silu(gate) * up",
		match:    matchSwiGLU,
		toCase:   caseSwiGLU,
	},
	{
		ID:          "cross_entropy",
		Kind:        KindRow,
		ReducesRows: true,
		Chain:       "(to fp32 of 16-bit logits) -> cross_entropy_loss (log_softmax -> nll_loss) over class indices",
		Anchors:     []string{"cross_entropy_loss"},
		Fused:       "one row-wise kernel forward (online log-sum-exp, the loss) and one backward pass (softmax - onehot), 16-bit logits read as they are",
		Advice:      "compute the loss in one pass over the logits (16-bit ones read as they are, without an fp32 copy) and its gradient in one more, never writing the log-probabilities: the fused CrossEntropy, Liger-Kernel's LigerCrossEntropyLoss, or torch.compile of the loss",
		Refuses:     "a loss with class weights, probability targets, or logits of another rank than 2 (F.cross_entropy's class dim is 1 for [N, C, d...])",
		Template:    "cross_entropy",
		Params:      []Param{paramReduction, paramIgnoreIndex, paramUpcast, paramLabelSmooth},
		Usage: "from {module} import CrossEntropy\n" +
			"loss_fn = CrossEntropy(ignore_index=-100)  # upcast=\"float\": as F.cross_entropy(logits.float(), labels)\n" +
			"loss = loss_fn(logits.view(-1, logits.shape[-1]), labels.view(-1))  # the 16-bit logits, no .float()\n" +
			"# a Hugging Face causal LM computes its loss inside forward() when given labels=; call it\n" +
			"# without them and compute the loss from its logits, the labels shifted as it shifts them:\n" +
			"# logits = model(input_ids).logits\n" +
			"# labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]\n" +
			"# loss = loss_fn(logits.view(-1, logits.shape[-1]), labels.reshape(-1))",
		match:  matchCrossEntropy,
		toCase: caseCrossEntropy,
		assume: assumeCrossEntropy,
		check:  checkCrossEntropy,
		advise: adviseCrossEntropy,
	},
}

// adviseAttention adds SDPA when the masked softmax sits between two GEMMs, and says how
// many instances an attention instance holds (fused whole there, not generated here).
// gemmBiasNote says how to hand dropout_add's kernel a GEMM's bias (Params.GEMMBias).
const gemmBiasNote = "the bias is the Linear's before the dropout: run the Linear without it and give it to the kernel, " +
	"y = DropoutAdd(p)(F.linear(h, dense.weight), residual, dense.bias) (Hugging Face's Conv1D: h @ conv.weight, conv.bias); " +
	"its backward sums the bias gradient in the pass that writes the dropout's, where eager's AddmmBackward0 reads the output gradient again for it"

// convBiasNote says how to hand layernorm_linear's module a convolution's bias
// (Params.ConvBias).
const convBiasNote = "the LayerNorm's input is a convolution's output with its bias (through a permute to channels-last): " +
	"give the bias to the module and run the convolution without it, " +
	"layer = LayerNormLinear.from_modules(norm, pwconv1, pre_bias=dwconv.bias); dwconv.register_parameter(\"bias\", None) " +
	"(the module holds the bias as its parameter pre_bias); it adds the bias in the pass that lays the rows out, and its " +
	"backward sums the bias gradient from the norm's input gradient, where eager's convolution backward sums it over the " +
	"permuted output gradient"

// convResidualNote says how to hand add_layernorm's module a convolution's bias as its
// residual (Params.ConvBias: ConvNeXt's stem).
const convResidualNote = "the residual is the bias of the convolution before the norm (its own add, then a permute to channels-last): " +
	"run the convolution without it and pass it, s, y = AddLayerNorm.from_layer_norm(norm, dim=1)(stem_conv(x), bias.view(1, -1, 1, 1)) " +
	"after bias = stem_conv.bias; stem_conv.register_parameter(\"bias\", None) (register bias on the module that calls them, so that the optimizer and the state dict keep it); " +
	"y is the norm's output (s, the sum, is not needed); the backward sums the bias gradient, where eager's convolution backward sums it " +
	"over the permuted output gradient"

// outCastNote says how to have rmsnorm_pyops' module write its output cast for the GEMMs
// that read it (Params.OutCast).
const outCastNote = "the norm's fp32 output is read only by GEMMs that autocast casts it for (q/k/v, gate/up): " +
	"norm = RMSNorm.from_module(llama_rms_norm, out_dtype=torch.bfloat16) (the autocast dtype, case.py's out_dtype) " +
	"writes that cast once under autocast (outside it y is eager's) and the GEMMs cast nothing; their gradients then reach the norm summed in that dtype " +
	"by autograd, where eager sums them in fp32"

// paramNote is a pattern's advice and folder note for a parameter that changes how its
// module is swapped in: where on(a shape group's parameters), text (the advice's line says
// "where NAME: text").
func paramNote(name string, on func(p Params) bool, text string) (func(*Opportunity) []string, func(ShapeGroup) []string) {
	advise := func(o *Opportunity) []string {
		for _, g := range o.Shapes {
			if on(g.Params) {
				return []string{"where " + name + ": " + text}
			}
		}
		return nil
	}
	note := func(g ShapeGroup) []string {
		if on(g.Params) {
			return []string{text}
		}
		return nil
	}
	return advise, note
}

func convBias(p Params) bool { return p.ConvBias }

func concatLinears(p Params) bool { return p.ConcatN > 0 && p.Linears > 1 }

// concatNote says how to run layernorm_linear's GEMMs as one over their concatenated weights
// (Params.ConcatN), the case the folder's kernel is generated for.
const concatNote = "the GEMMs reading the norm's output (Q, K and V) run as one over their concatenated weights, the case this kernel is for: " +
	"qkv = torch.nn.Linear(q.in_features, q.out_features + k.out_features + v.out_features, bias=q.bias is not None) with weight and bias the torch.cat of theirs (dim 0), " +
	"layer = LayerNormLinear.from_modules(layer_norm, qkv), then q_out, k_out, v_out = layer(x).split([q.out_features, k.out_features, v.out_features], dim=-1); " +
	"qkv's parameters replace the three Linears' (build the optimizer after the swap); its backward gives the norm's output one gradient " +
	"(one GEMM), where eager's sums the three"

// adviseLayerNormLinear and noteLayerNormLinear: the conv_bias and the concatenated GEMMs notes.
func adviseLayerNormLinear(o *Opportunity) []string {
	return append(adviseConvBiasLL(o), adviseConcatLL(o)...)
}

func noteLayerNormLinear(g ShapeGroup) []string {
	return append(noteConvBiasLL(g), noteConcatLL(g)...)
}

var (
	adviseAddLayerNorm, noteAddLayerNorm = paramNote("conv_bias", convBias, convResidualNote)
	adviseConvBiasLL, noteConvBiasLL     = paramNote("conv_bias", convBias, convBiasNote)
	adviseConcatLL, noteConcatLL         = paramNote("concat_n", concatLinears, concatNote)
	adviseDropoutAdd, noteDropoutAdd     = paramNote("gemm_bias", func(p Params) bool { return p.GEMMBias }, gemmBiasNote)
	adviseRMSNorm, noteRMSNorm           = paramNote("out_cast", func(p Params) bool { return p.OutCast }, outCastNote)
)

func adviseAttention(o *Opportunity) []string {
	out := heldByAttention(o)
	for _, s := range o.Shapes {
		if s.Params.Attention {
			return append(out, "the whole bmm -> mask -> softmax -> (dropout) -> bmm is present: use F.scaled_dot_product_attention (flash/memory-efficient attention), e.g. attn_implementation=\"sdpa\" in transformers")
		}
	}
	return out
}

// noTrainingSaving says why an instance of p that runs in training (it has a backward in
// the trace) is counted with no saving, or "" when it is counted like any other.
func (p *Pattern) noTrainingSaving() string {
	switch {
	case p.ForwardOnly:
		return "forward only (no backward)"
	case p.SlowerInTraining != "":
		return "no faster than eager in training: " + p.SlowerInTraining
	}
	return ""
}
