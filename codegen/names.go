package codegen

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// ParseDtype maps a dtype as traces and users spell it ("c10::BFloat16", "float",
// "torch.float16", "bf16", ...) to the Spec spelling ("fp32", "fp16" or "bf16").
func ParseDtype(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fp32", "float", "float32", "torch.float32", "torch.float", "c10::float":
		return "fp32", nil
	case "fp16", "half", "float16", "torch.float16", "torch.half", "c10::half":
		return "fp16", nil
	case "bf16", "bfloat16", "torch.bfloat16", "c10::bfloat16":
		return "bf16", nil
	}
	return "", fmt.Errorf("codegen: unsupported dtype %s (want fp32, fp16 or bf16)", strconv.Quote(s))
}

// DirName suggests a folder name for spec: pattern, the variant (tanh GELU, the mask kind),
// dtype, the first shape (and N for GEMM patterns) and a short hash of the validated spec
// (params and source included; not the cost model's estimates, so a case keeps its name when
// the model changes), e.g. "bias_gelu-tanh-bf16-8x512x3072-1a2b3c4d". Only letters, digits,
// '_', '-' and 'x' appear in it.
func DirName(spec Spec) (string, error) {
	s, h, err := resolvedHash(spec)
	if err != nil {
		return "", err
	}
	dims := make([]string, len(s.Shapes[0]))
	for i, d := range s.Shapes[0] {
		dims[i] = strconv.FormatInt(d, 10)
	}
	parts := []string{s.Pattern}
	if s.Params.Approximate == "tanh" {
		parts = append(parts, "tanh")
	}
	if k := s.Params.MaskKind; k != "" && k != "none" {
		parts = append(parts, k) // an enum value: letters only
	}
	shape := strings.Join(dims, "x")
	if patterns.IsGEMM(s.Pattern) && len(s.Shapes) > 1 {
		shape += "x" + strconv.FormatInt(s.Shapes[1][0], 10)
	}
	parts = append(parts, s.Dtype, shape, h)
	return strings.Join(parts, "-"), nil
}

// resolvedHash is spec resolved (defaults applied, checked) and its specHash.
func resolvedHash(spec Spec) (Spec, string, error) {
	s, err := resolve(spec)
	if err != nil {
		return Spec{}, "", err
	}
	h, err := specHash(s)
	return s, h, err
}

// specHash is 8 hex digits of the SHA-256 of the resolved spec's manifest without the cost
// model's estimates and the trace's timings (so a case keeps its names when they change).
func specHash(s Spec) (string, error) {
	s.EstSavingUs, s.EstFusedUs, s.EstBackwardSavingUs, s.Instances, s.GPUTimeUs = 0, 0, 0, 0, 0
	m, err := manifest(s, nil, "")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(m)
	return hex.EncodeToString(sum[:4]), nil
}

// ModuleName is the Python module name spec's kernel is imported by once copied beside a
// model: "fuseadvise_<pattern>_<the hash of DirName>", e.g. "fuseadvise_bias_gelu_1a2b3c4d".
// Each kernel folder has its own, so several copied into one folder do not collide ("kernel"
// would).
func ModuleName(spec Spec) (string, error) {
	s, h, err := resolvedHash(spec)
	if err != nil {
		return "", err
	}
	return "fuseadvise_" + s.Pattern + "_" + h, nil
}

// Usage is pattern's swap-in snippet (the registry's Usage, or for a generic chain a call of
// its fused()) importing the kernel from module; "" for an unknown pattern.
func Usage(pattern, module string) string {
	if pattern == GenericPattern {
		return "from " + module + " import fused\n\n" +
			"# the chain's inputs in the order of case.py's INPUTS; a tuple in the order of its OUTPUTS\n" +
			"outputs = fused(*inputs)"
	}
	p, ok := patterns.Lookup(pattern)
	if !ok {
		return ""
	}
	return strings.ReplaceAll(p.Usage, patterns.UsageModule, module)
}
