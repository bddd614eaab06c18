package main

import (
	"errors"

	"github.com/fuseadvise/fuseadvise/codegen"
)

// specsFor turns a trace's (or a saved analysis's) opportunities into generator specs, one
// per pattern, shape group and dtype, with unique folder names.
func specsFor(args []string, from string, o analyzeOptions) ([]codegen.Spec, []string, error) {
	return nil, nil, errors.New("gen from a trace: not wired yet")
}
