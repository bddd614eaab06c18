package templates

import (
	"fmt"
	"regexp"
	"strings"
)

// The helpers every template carries come from one source, _common/shared.py: a block there
// runs from a line "# --- fa:shared NAME ---" to "# --- fa:end NAME ---", and a template
// carries it as the same lines between the same markers. Copies are generated (SyncShared),
// never edited by hand; the package's tests fail when a copy differs.

// SharedSource is the path, inside the template tree, of the helpers' one source.
const SharedSource = "_common/shared.py"

var (
	sharedBegin = regexp.MustCompile(`(?m)^# --- fa:shared ([a-z0-9_]+)\b.*$`)
	sharedEnd   = "# --- fa:end %s ---"
)

// SharedBlocks returns the blocks of src (shared.py's text) by name, each with its markers.
func SharedBlocks(src string) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range sharedBlocksAt(src) {
		if m.err != nil {
			return nil, m.err
		}
		if _, dup := out[m.name]; dup {
			return nil, fmt.Errorf("%s: block %q defined twice", SharedSource, m.name)
		}
		out[m.name] = fmt.Sprintf("# --- fa:shared %s ---\n%s%s", m.name, m.body, fmt.Sprintf(sharedEnd, m.name))
	}
	return out, nil
}

type sharedBlock struct {
	name       string
	start, end int // byte range of the whole block, markers included
	body       string
	err        error
}

func sharedBlocksAt(src string) []sharedBlock {
	var out []sharedBlock
	for _, loc := range sharedBegin.FindAllStringSubmatchIndex(src, -1) {
		name := src[loc[2]:loc[3]]
		endMark := fmt.Sprintf(sharedEnd, name)
		bodyStart := loc[1] + 1
		if bodyStart > len(src) {
			bodyStart = len(src)
		}
		i := strings.Index(src[bodyStart:], endMark)
		if i < 0 {
			out = append(out, sharedBlock{name: name, err: fmt.Errorf("block %q has no end marker %q", name, endMark)})
			continue
		}
		out = append(out, sharedBlock{name: name, start: loc[0], end: bodyStart + i + len(endMark), body: src[bodyStart : bodyStart+i]})
	}
	return out
}

// SyncShared returns kernel with every shared block it carries replaced by the source's
// (blocks from SharedBlocks), and the names of the blocks it carries.
func SyncShared(kernel string, blocks map[string]string) (string, []string, error) {
	var b strings.Builder
	var names []string
	last := 0
	for _, m := range sharedBlocksAt(kernel) {
		if m.err != nil {
			return "", nil, m.err
		}
		want, ok := blocks[m.name]
		if !ok {
			return "", nil, fmt.Errorf("block %q is not in %s", m.name, SharedSource)
		}
		b.WriteString(kernel[last:m.start])
		b.WriteString(want)
		last = m.end
		names = append(names, m.name)
	}
	b.WriteString(kernel[last:])
	return b.String(), names, nil
}
