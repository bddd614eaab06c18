package trace

import "strings"

// rawTrace is the parser's output for one file, before the model is built.
type rawTrace struct {
	chunks     []*chunk
	hasEvents  bool
	rank       int
	worldSize  int
	baseTimeNs int64
	devices    []Device
	meta       map[string]string
}

// parseDoc reads the top level of a trace: metadata keys before and after
// traceEvents, and the events array (parsed in parallel chunks).
func parseDoc(s string) (*rawTrace, *scanError) {
	r := &rawTrace{rank: -1, meta: map[string]string{}}
	sc := &scanner{s: s}
	if strings.HasPrefix(s, "\xef\xbb\xbf") {
		sc.i = 3
	}
	switch sc.peek() {
	case '[':
		chunks, end, err := parseArray(s, sc.i, true)
		if err != nil {
			return nil, err
		}
		r.chunks, r.hasEvents = chunks, true
		sc.i = end
	case '{':
		sc.i++
		if sc.peek() == '}' {
			sc.i++
			break
		}
		for sc.err == nil {
			k := sc.str()
			if !sc.expect(':') {
				break
			}
			keyOff := sc.i
			switch k {
			case "traceEvents":
				if sc.peek() != '[' {
					sc.unexpected("'[' (traceEvents must be an array)")
					break
				}
				chunks, end, err := parseArray(s, sc.i, false)
				if err != nil {
					return nil, err
				}
				r.chunks, r.hasEvents = chunks, true
				sc.i = end
			case "deviceProperties":
				r.devices = parseDevices(sc)
			case "distributedInfo":
				parseDistInfo(sc, r)
			case "baseTimeNanoseconds":
				t, _ := sc.scalar()
				if v, ok := parseInt(t); ok {
					r.baseTimeNs = v
				} else if sc.err == nil {
					sc.failf(keyOff, "invalid baseTimeNanoseconds %q", t)
				}
				r.meta[k] = strings.Clone(t)
			default:
				switch sc.peek() {
				case '{', '[':
					sc.skip()
				default:
					v, _ := sc.scalar()
					r.meta[strings.Clone(k)] = strings.Clone(v)
				}
			}
			if sc.err != nil {
				break
			}
			switch sc.peek() {
			case ',':
				sc.i++
				continue
			case '}':
				sc.i++
			default:
				sc.unexpected("',' or '}' after a top-level value")
			}
			break
		}
	default:
		sc.unexpected("'{' or '[' (not a JSON trace)")
	}
	if sc.err != nil {
		return nil, sc.err
	}
	if sc.peek() != 0 {
		return nil, &scanError{sc.i, "unexpected data after the JSON value"}
	}
	if !r.hasEvents {
		return nil, &scanError{0, "not a trace: no traceEvents array"}
	}
	return r, nil
}

func parseDevices(sc *scanner) []Device {
	if sc.peek() != '[' {
		sc.skip()
		return nil
	}
	var devs []Device
	sc.array(func(int) {
		if sc.peek() != '{' {
			sc.skip()
			return
		}
		d := Device{}
		sc.object(func(k string) {
			switch k {
			case "id":
				d.ID = int(scalarInt(sc))
			case "name":
				v, _ := sc.scalar()
				d.Name = strings.Clone(v)
			case "totalGlobalMem":
				d.TotalGlobalMem = scalarInt(sc)
			case "computeMajor":
				d.ComputeMajor = int(scalarInt(sc))
			case "computeMinor":
				d.ComputeMinor = int(scalarInt(sc))
			case "numSms":
				d.NumSMs = int(scalarInt(sc))
			default:
				sc.skip()
			}
		})
		devs = append(devs, d)
	})
	return devs
}

// scalarInt reads any value and returns it as an integer (0 if it is not one).
func scalarInt(sc *scanner) int64 {
	switch sc.peek() {
	case '{', '[':
		sc.skip()
		return 0
	}
	v, _ := sc.scalar()
	n, _ := parseInt(v)
	return n
}

func parseDistInfo(sc *scanner, r *rawTrace) {
	if sc.peek() != '{' {
		sc.skip()
		return
	}
	sc.object(func(k string) {
		switch k {
		case "rank":
			v, _ := sc.scalar()
			if n, ok := parseInt(v); ok {
				r.rank = int(n)
			}
		case "world_size":
			v, _ := sc.scalar()
			if n, ok := parseInt(v); ok {
				r.worldSize = int(n)
			}
		case "backend", "nccl_version":
			v, _ := sc.scalar()
			r.meta["distributedInfo."+k] = strings.Clone(v)
		default:
			sc.skip()
		}
	})
}
