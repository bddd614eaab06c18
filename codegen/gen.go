package codegen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// Item is one folder to write: a spec and its folder name (DirName), or a generic chain's
// spec (Generic, named by GenericDirName).
type Item struct {
	Spec    Spec
	Name    string
	Generic *GenericSpec
}

// SpecFromGroup maps one shape group of an opportunity of pattern to a spec through the
// pattern's registry entry (patterns.Pattern.Case), or says why it cannot. Nothing from the
// trace but validated numbers and enum values reaches the spec's code-bearing fields; the
// Source is left for the caller.
func SpecFromGroup(pattern string, g patterns.ShapeGroup) (Spec, string) {
	s := Spec{Pattern: pattern, EstSavingUs: g.EstSavingUs, EstBackwardSavingUs: g.EstBackwardSavingUs,
		Instances: g.Instances, GPUTimeUs: g.GPUTimeUs}
	if g.Instances > 0 && g.EstFusedUs > 0 {
		s.EstFusedUs = g.EstFusedUs / float64(g.Instances)
	}
	p, ok := patterns.Lookup(pattern)
	if !ok {
		return s, "no template"
	}
	c, why := p.Case(g)
	s.Dtype, s.Shapes, s.Params = c.Dtype, c.Shapes, c.Params
	s.Notes = p.Notes(g)
	return s, why
}

// SpecsFromReport turns an analysis's opportunities into specs, one per pattern, shape group
// and dtype, named by DirName. Groups a template cannot express are skipped with a reason
// (returned for the user), and so are a group's instances inside attention chains
// (ShapeGroup.InAttention: a mask_softmax within a chain the attention folder fuses whole).
func SpecsFromReport(rep *patterns.Report) (items []Item, skipped []string, err error) {
	have := map[string]bool{}
	for _, p := range Patterns() {
		have[p] = true
	}
	for _, op := range rep.Opportunities {
		if !have[op.Pattern] {
			skipped = append(skipped, op.Pattern+": no template")
			continue
		}
		for _, g := range op.Shapes {
			covered := ""
			if g.InAttention > 0 {
				// one chain, one folder: the attention folder holds these instances' chains
				if g.InAttention >= g.Instances {
					skipped = append(skipped, fmt.Sprintf("%s %s %s: its %d instance(s) lie inside attention chains: the attention folder covers them",
						op.Pattern, patterns.FormatDims(g.Dims), g.DType, g.Instances))
					continue
				}
				covered = fmt.Sprintf("; %d of its %d instances lie inside attention chains (the attention folder covers them): counted without them",
					g.InAttention, g.Instances)
				g = outsideAttention(g)
			}
			s, why := SpecFromGroup(op.Pattern, g)
			if why != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s %s: %s", op.Pattern, patterns.FormatDims(g.Dims), g.DType, why))
				continue
			}
			s.Source = Source{Trace: rep.Trace.Path, Site: site(op, g) + covered + assumed(op.Pattern, g)}
			if err := Validate(s); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s %s %s: %v", op.Pattern, patterns.FormatDims(g.Dims), g.DType, err))
				continue
			}
			name, err := DirName(s)
			if err != nil {
				return nil, nil, err
			}
			items = append(items, Item{Spec: s, Name: name})
		}
	}
	gen, gskipped, err := GenericItems(rep)
	return append(items, gen...), append(skipped, gskipped...), err
}

// outsideAttention is g less its instances inside attention chains: their count, and its
// GPU time and estimates in proportion (the instances of one group have the same shapes).
func outsideAttention(g patterns.ShapeGroup) patterns.ShapeGroup {
	n := g.Instances - g.InAttention
	f := float64(n) / float64(g.Instances)
	g.GPUTimeUs, g.EstFusedUs, g.EstSavingUs = g.GPUTimeUs*f, g.EstFusedUs*f, g.EstSavingUs*f
	g.BackwardGPUTimeUs, g.EstFusedBackwardUs, g.EstBackwardSavingUs = g.BackwardGPUTimeUs*f, g.EstFusedBackwardUs*f, g.EstBackwardSavingUs*f
	g.Instances, g.InAttention = n, 0
	return g
}

// GenericItems turns an analysis's generic chains into folders, one per chain group with a
// program; a chain without one is skipped with its reason, and so is a chain whose program
// does not validate (an analysis JSON edited by hand).
func GenericItems(rep *patterns.Report) (items []Item, skipped []string, err error) {
	for _, c := range rep.GenericChains {
		what := fmt.Sprintf("generic %s %v %s", strings.Join(c.Ops, ","), c.Dims, c.DType)
		if c.Program == nil {
			skipped = append(skipped, what+": "+c.Unrecoverable)
			continue
		}
		dt := string(c.DType)
		if _, ok := dtypes[dt]; !ok {
			dt = "fp32" // a chain whose largest value is bool or int64: its program fixes every dtype
		}
		s := GenericSpec{Program: c.Program, Dtype: dt, Ops: c.Ops, EstSavingUs: c.EstSavingUs, EstFusedUs: c.EstFusedUs,
			EstBackwardSavingUs: c.EstBackwardSavingUs, Instances: c.Instances, GPUTimeUs: c.GPUTimeUs,
			Source: Source{Trace: rep.Trace.Path, Site: fmt.Sprintf("%d instance(s) of %s", c.Instances, strings.Join(c.Ops, " -> "))}}
		name, err := GenericDirName(s)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", what, err))
			continue
		}
		items = append(items, Item{Name: name, Generic: &s})
	}
	return items, skipped, nil
}

// site describes where the chain was found, for manifest.json and README.md (data only).
func site(op patterns.Opportunity, g patterns.ShapeGroup) string {
	s := fmt.Sprintf("%d instance(s) of %s", g.Instances, op.Pattern)
	if len(g.Sources) > 0 {
		s += " at " + strings.Join(g.Sources, "; ")
	}
	return s
}

// assumed names the parameters the trace did not record ("; " before each), from the
// pattern's registry entry.
func assumed(pattern string, g patterns.ShapeGroup) string {
	p, ok := patterns.Lookup(pattern)
	if !ok {
		return ""
	}
	a := p.Assumed(g)
	if len(a) == 0 {
		return ""
	}
	return "; " + strings.Join(a, "; ")
}

// WriteFolders writes one folder per item under root and returns their paths. Every spec is
// validated and every folder checked for existence (refused unless force) before anything
// is written.
func WriteFolders(root string, items []Item, force bool) ([]string, error) {
	for _, it := range items {
		if it.Generic != nil {
			if err := ValidateGeneric(*it.Generic); err != nil {
				return nil, err
			}
		} else if err := Validate(it.Spec); err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(root, it.Name)); err == nil && !force {
			return nil, fmt.Errorf("%s: already exists (use -force to replace it)", filepath.Join(root, it.Name))
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	var dirs []string
	for _, it := range items {
		d := filepath.Join(root, it.Name)
		write := func() error { return Write(d, it.Spec, force) }
		if it.Generic != nil {
			write = func() error { return WriteGeneric(d, *it.Generic, force) }
		}
		if err := write(); err != nil {
			return dirs, err
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}
