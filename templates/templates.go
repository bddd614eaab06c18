package templates

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed _common/fa_testing.py _common/test_generated.py _common/bench.py _common/pytest.ini _common/shared.py
//go:embed */kernel.py */reference.py */adapter.py
//go:embed _optimizer/master_adamw.py _optimizer/test_master_adamw.py
//go:embed _mha/multihead_attention.py _mha/test_multihead_attention.py
var files embed.FS

// MasterAdamW is the folder, inside the template tree, of the optimizer that keeps GEMM
// weights in bf16 with fp32 masters (patterns.MasterWeights): a standalone module and its
// tests, written as they are (codegen.WriteModule).
const MasterAdamW = "_optimizer"

// MultiheadAttention is the folder of the drop-in nn.MultiheadAttention without its packed
// projection's copies (patterns.MultiheadAttention), a standalone module and its tests.
const MultiheadAttention = "_mha"

// FS returns the embedded template tree.
func FS() fs.FS { return files }

// Patterns returns the pattern ids that have a template, sorted.
func Patterns() []string {
	ents, err := fs.Glob(files, "*/kernel.py")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e[:len(e)-len("/kernel.py")])
	}
	sort.Strings(out)
	return out
}

// Has reports whether pattern has a template.
func Has(pattern string) bool {
	for _, p := range Patterns() {
		if p == pattern {
			return true
		}
	}
	return false
}

// Read returns the content of one embedded file, e.g. Read("bias_gelu/kernel.py").
func Read(name string) ([]byte, error) { return files.ReadFile(name) }
