package internal

import (
	_ "github.com/google/pprof/profile"
	_ "github.com/klauspost/compress/gzip"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/tidwall/gjson"
	_ "golang.org/x/term"
)
