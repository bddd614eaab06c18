package codegen

import (
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
	"github.com/fuseadvise/fuseadvise/templates"
)

// TestModules: every module gen can write has its files in the template tree, a README and
// a rule for when it is offered, and OfferedModules gives exactly the modules whose advice a
// report offers.
func TestModules(t *testing.T) {
	for _, m := range Modules {
		if m.Offered == nil || m.Readme == "" || m.What == "" || len(m.Files) < 2 {
			t.Errorf("%s: incomplete: %+v", m.Dir, m)
		}
		for _, f := range m.Files {
			if _, err := templates.Read(m.Template + "/" + f); err != nil {
				t.Errorf("%s: %v", m.Dir, err)
			}
		}
	}
	offered := &patterns.Report{
		MasterWeights:      []patterns.MasterWeights{{Why: "not bf16"}},
		MultiheadAttention: []patterns.MultiheadAttention{{}},
	}
	got := OfferedModules(offered)
	if len(got) != 1 || got[0].Dir != patterns.MultiheadAttentionDir {
		t.Errorf("OfferedModules = %v, want the drop-in alone", got)
	}
	offered.MasterWeights[0].Why = ""
	if got := OfferedModules(offered); len(got) != 2 {
		t.Errorf("OfferedModules = %v, want both", got)
	}
	if got := OfferedModules(nil); got != nil {
		t.Errorf("OfferedModules(nil) = %v", got)
	}
}
