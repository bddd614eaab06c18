package trace

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small hand-written JSON scanner over a string (usually a zero-copy
// view of a memory-mapped file). It reads values in one pass and records the first
// error with its byte offset; after an error every method returns zero values.
type scanner struct {
	s   string
	i   int
	err *scanError
}

type scanError struct {
	off int
	msg string
}

func (sc *scanner) fail(off int, msg string) {
	if sc.err == nil {
		sc.err = &scanError{off, msg}
	}
	sc.i = len(sc.s)
}

func (sc *scanner) failf(off int, format string, args ...any) {
	if sc.err == nil {
		sc.fail(off, sprintf(format, args...))
	}
}

var isSpace = [256]bool{' ': true, '\n': true, '\r': true, '\t': true}

// ws skips JSON whitespace. The check is small enough to be inlined; runs of
// whitespace go to wsRun.
func (sc *scanner) ws() {
	if sc.i < len(sc.s) && isSpace[sc.s[sc.i]] {
		sc.wsRun()
	}
}

func (sc *scanner) wsRun() {
	i, s := sc.i+1, sc.s
	for i < len(s) && isSpace[s[i]] {
		i++
		// Indentation: skip runs of spaces 8 bytes at a time.
		for i+8 <= len(s) && load64(s[i:i+8]) == 0x2020202020202020 {
			i += 8
		}
	}
	sc.i = i
}

// load64 reads 8 bytes little-endian (one load on amd64 and arm64).
func load64(b string) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// peek returns the next non-space byte, or 0 at the end.
func (sc *scanner) peek() byte {
	sc.ws()
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

// expect consumes byte c after optional whitespace.
func (sc *scanner) expect(c byte) bool {
	sc.ws()
	if sc.i < len(sc.s) && sc.s[sc.i] == c {
		sc.i++
		return true
	}
	sc.unexpected("'" + string(c) + "'")
	return false
}

func (sc *scanner) unexpected(want string) {
	if sc.err != nil {
		return
	}
	if sc.i >= len(sc.s) {
		sc.fail(sc.i, "unexpected end of input, want "+want)
		return
	}
	sc.failf(sc.i, "unexpected %s, want %s", quoteByte(sc.s[sc.i]), want)
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return sprintf("byte 0x%02x", c)
}

// str reads a JSON string. Without escapes the result is a substring of the input
// (no copy); with escapes it is decoded into a new string.
func (sc *scanner) str() string {
	sc.ws()
	if sc.i >= len(sc.s) || sc.s[sc.i] != '"' {
		sc.unexpected("string")
		return ""
	}
	start := sc.i + 1
	s := sc.s
	// Control characters inside strings are tolerated (as Python's strict=False).
	// Most strings (keys) are short: look at the first bytes directly.
	for j := start; j < start+24 && j < len(s); j++ {
		switch s[j] {
		case '"':
			sc.i = j + 1
			return s[start:j]
		case '\\':
			return sc.strEscaped(start, j)
		}
	}
	q := strings.IndexByte(s[start:], '"')
	if q < 0 {
		sc.fail(sc.i, "unterminated string")
		return ""
	}
	v := s[start : start+q]
	if strings.IndexByte(v, '\\') >= 0 {
		return sc.strEscaped(start, start+strings.IndexByte(v, '\\'))
	}
	sc.i = start + q + 1
	return v
}

func (sc *scanner) strEscaped(start, j int) string {
	s := sc.s
	var b strings.Builder
	b.WriteString(s[start:j])
	for j < len(s) {
		c := s[j]
		switch {
		case c == '"':
			sc.i = j + 1
			return b.String()
		case c != '\\':
			b.WriteByte(c)
			j++
			continue
		}
		if j+1 >= len(s) {
			break
		}
		e := s[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(s, j)
			if !ok {
				sc.fail(j-2, "invalid \\u escape")
				return ""
			}
			j += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s, j+2); ok && j+1 < len(s) && s[j] == '\\' && s[j+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						j += 6
					}
				}
			}
			b.WriteRune(r)
		default:
			sc.failf(j-2, "invalid escape \\%c", e)
			return ""
		}
	}
	sc.fail(start-1, "unterminated string")
	return ""
}

func hex4(s string, j int) (rune, bool) {
	if j+4 > len(s) {
		return 0, false
	}
	var r rune
	for k := j; k < j+4; k++ {
		c := s[k]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// num reads a JSON number and returns its text.
func (sc *scanner) num() string {
	sc.ws()
	s := sc.s
	start := sc.i
	j := start
	if j < len(s) && s[j] == '-' {
		j++
	}
	d0 := j
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == d0 {
		sc.i = start
		sc.unexpected("number")
		return ""
	}
	if j < len(s) && s[j] == '.' {
		j++
		f0 := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == f0 {
			sc.fail(j, "invalid number: no digits after '.'")
			return ""
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		e0 := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == e0 {
			sc.fail(j, "invalid number: no exponent digits")
			return ""
		}
	}
	sc.i = j
	return s[start:j]
}

// lit reads true, false or null.
func (sc *scanner) lit() string {
	sc.ws()
	for _, w := range [...]string{"true", "false", "null"} {
		if strings.HasPrefix(sc.s[sc.i:], w) {
			sc.i += len(w)
			return w
		}
	}
	sc.unexpected("value")
	return ""
}

// scalar reads a string, number or literal; for strings isStr is true.
func (sc *scanner) scalar() (v string, isStr bool) {
	switch c := sc.peek(); {
	case c == '"':
		return sc.str(), true
	case c == '-' || (c >= '0' && c <= '9'):
		return sc.num(), false
	default:
		return sc.lit(), false
	}
}

const maxDepth = 512

// skip skips one value of any type, checking its syntax.
func (sc *scanner) skip() {
	sc.skipDepth(0)
}

func (sc *scanner) skipDepth(depth int) {
	if depth > maxDepth {
		sc.fail(sc.i, "nesting too deep")
		return
	}
	switch c := sc.peek(); c {
	case '{':
		sc.i++
		if sc.peek() == '}' {
			sc.i++
			return
		}
		for sc.err == nil {
			sc.str()
			if !sc.expect(':') {
				return
			}
			sc.skipDepth(depth + 1)
			switch sc.peek() {
			case ',':
				sc.i++
			case '}':
				sc.i++
				return
			default:
				sc.unexpected("',' or '}'")
				return
			}
		}
	case '[':
		sc.i++
		if sc.peek() == ']' {
			sc.i++
			return
		}
		for sc.err == nil {
			sc.skipDepth(depth + 1)
			switch sc.peek() {
			case ',':
				sc.i++
			case ']':
				sc.i++
				return
			default:
				sc.unexpected("',' or ']'")
				return
			}
		}
	case '"':
		sc.str()
	default:
		sc.scalar()
	}
}

var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skipFast skips one value without checking the syntax inside objects and arrays
// (only strings and bracket depth are tracked): for args the parser does not read.
func (sc *scanner) skipFast() {
	c := sc.peek()
	if c != '{' && c != '[' {
		sc.skip()
		return
	}
	s := sc.s
	i := sc.i
	depth := 0
	for i < len(s) {
		if !structural[s[i]] {
			i++
			continue
		}
		switch s[i] {
		case '"':
			i++
			for {
				j := strings.IndexByte(s[i:], '"')
				if j < 0 {
					sc.fail(len(s), "unexpected end of input in a string")
					return
				}
				i += j
				k := i - 1
				for k >= 0 && s[k] == '\\' {
					k--
				}
				i++
				if (i-2-k)%2 == 0 {
					break
				}
			}
			continue
		case '{', '[':
			depth++
		default:
			depth--
			if depth == 0 {
				sc.i = i + 1
				return
			}
		}
		i++
	}
	sc.fail(len(s), "unexpected end of input")
}

// raw skips one value and returns its text.
func (sc *scanner) raw() string {
	sc.ws()
	start := sc.i
	sc.skipFast()
	if sc.err != nil {
		return ""
	}
	return sc.s[start:sc.i]
}

// object calls f for every key of an object, with the scanner positioned at the
// value; f must consume the value. It returns false on a syntax error.
func (sc *scanner) object(f func(key string)) bool {
	if !sc.expect('{') {
		return false
	}
	if sc.peek() == '}' {
		sc.i++
		return true
	}
	for sc.err == nil {
		k := sc.str()
		if !sc.expect(':') {
			return false
		}
		f(k)
		switch sc.peek() {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return true
		default:
			sc.unexpected("',' or '}'")
			return false
		}
	}
	return false
}

// array calls f for every element of an array; f must consume the element.
func (sc *scanner) array(f func(i int)) bool {
	if !sc.expect('[') {
		return false
	}
	if sc.peek() == ']' {
		sc.i++
		return true
	}
	for n := 0; sc.err == nil; n++ {
		f(n)
		switch sc.peek() {
		case ',':
			sc.i++
		case ']':
			sc.i++
			return true
		default:
			sc.unexpected("',' or ']'")
			return false
		}
	}
	return false
}

// parseInt parses the text of a JSON number as an int64. Fractions are truncated
// ("68.0" is 68); out-of-range or non-numeric text gives ok == false.
func parseInt(t string) (int64, bool) {
	if t == "" {
		return 0, false
	}
	neg := false
	j := 0
	if t[0] == '-' {
		neg = true
		j = 1
	}
	if j >= len(t) {
		return 0, false
	}
	var n uint64
	for ; j < len(t); j++ {
		c := t[j]
		if c < '0' || c > '9' {
			if c == '.' {
				// Accept a fraction made of digits only.
				for k := j + 1; k < len(t); k++ {
					if t[k] < '0' || t[k] > '9' {
						return 0, false
					}
				}
				break
			}
			return 0, false
		}
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// parseMicros converts the decimal text of a time in microseconds into integer
// nanoseconds exactly (never through float64): "1695835542514261" (integer µs),
// "1712195495519695.8" (float µs), "2413669096090.100" (relative, three decimals).
// Digits beyond the nanosecond are rounded half up. Exponent forms fall back to
// strconv.ParseFloat.
func parseMicros(t string) (int64, bool) {
	if t == "" {
		return 0, false
	}
	neg := false
	j := 0
	if t[0] == '-' {
		neg = true
		j = 1
	}
	var n uint64
	digits := 0
	for ; j < len(t) && t[j] >= '0' && t[j] <= '9'; j++ {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(t[j]-'0')
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	var frac uint64
	if j < len(t) && t[j] == '.' {
		j++
		k := 0
		for ; j < len(t) && t[j] >= '0' && t[j] <= '9'; j++ {
			if k < 3 {
				frac = frac*10 + uint64(t[j]-'0')
			} else if k == 3 && t[j] >= '5' {
				frac++ // round half up on the first dropped digit
			}
			k++
		}
		for ; k < 3; k++ {
			frac *= 10
		}
	}
	if j < len(t) {
		if t[j] != 'e' && t[j] != 'E' {
			return 0, false
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || f*1000 > 9.2e18 || f*1000 < -9.2e18 || f != f {
			return 0, false
		}
		return int64(f*1000 + copysignHalf(f)), true
	}
	if n > (1<<63-1-999)/1000 {
		return 0, false
	}
	v := int64(n*1000 + frac)
	if neg {
		v = -v
	}
	return v, true
}

func copysignHalf(f float64) float64 {
	if f < 0 {
		return -0.5
	}
	return 0.5
}
