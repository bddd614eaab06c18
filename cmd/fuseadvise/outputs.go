package main

import (
	"os"
	"path/filepath"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// checkOutputs refuses output paths that would overwrite an input (a trace, a file of a
// trace directory, an execution trace) or each other, before any work is done.
func checkOutputs(inputs []string, outputs ...string) error {
	var in []os.FileInfo
	var names []string
	for _, p := range inputs {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue // the reader reports missing inputs, naming them
		}
		if fi.IsDir() {
			entries, _ := os.ReadDir(p)
			for _, e := range entries {
				if efi, err := os.Stat(filepath.Join(p, e.Name())); err == nil && !efi.IsDir() {
					in, names = append(in, efi), append(names, filepath.Join(p, e.Name()))
				}
			}
			continue
		}
		in, names = append(in, fi), append(names, p)
	}
	for i, o := range outputs {
		if o == "" {
			continue
		}
		for _, o2 := range outputs[:i] {
			if o2 != "" && filepath.Clean(o2) == filepath.Clean(o) {
				return usagef("%s is named as two outputs", o)
			}
		}
		ofi, err := os.Stat(o)
		if err != nil {
			continue
		}
		for j, fi := range in {
			if os.SameFile(ofi, fi) {
				return usagef("output %s is the input %s: refusing to overwrite it", o, names[j])
			}
		}
	}
	return nil
}

// checkPattern refuses a -pattern that is not in the catalog, before any trace is read.
func checkPattern(id string) error {
	if id == "" {
		return nil
	}
	if _, ok := patterns.Lookup(id); ok {
		return nil
	}
	return usagef("unknown -pattern %q (the catalog: %s)", id, catalogIDs())
}
