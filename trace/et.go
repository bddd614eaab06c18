package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// ExecTrace is a PyTorch execution trace (ExecutionTraceObserver, *.et.json[.gz]):
// every operator with the exact tensors it read and wrote.
type ExecTrace struct {
	Path  string
	Nodes []ETNode
}

// ETNode is one execution-trace node.
type ETNode struct {
	ID   int64
	Name string
	RFID int64 // the rf_id attribute (= Op.RecordFunctionID); -1 when absent
	// Inputs and Outputs keep the node's argument positions: a value that is not a
	// tensor is a Tensor with ID -1.
	Inputs, Outputs []Tensor
}

// Tensor is one tensor value of an execution-trace node:
// [tensor_id, storage_id, offset, numel, itemsize, device].
type Tensor struct {
	ID, Storage, Offset, Numel, ItemSize int64
	Device                               string
	// Text is a String argument's value (gelu's approximate: "none" or "tanh"), "" for
	// anything else.
	Text string
	// Elem is a tensor's element type as the trace names it ("float", "c10::BFloat16"), ""
	// when not recorded.
	Elem string
	// List holds the tensors of a list of tensors (a GenericList[Tensor(...), ...] argument:
	// an optimizer's foreach ops take their parameters so), nil for anything else.
	List []Tensor
}

// IsTensor reports whether the value was a tensor.
func (t Tensor) IsTensor() bool { return t.ID >= 0 }

type etValues struct {
	Values []json.RawMessage `json:"values"`
	Types  []string          `json:"types"`
}

type etAttr struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

type etNodeJSON struct {
	ID      int64    `json:"id"`
	Name    string   `json:"name"`
	Inputs  etValues `json:"inputs"`
	Outputs etValues `json:"outputs"`
	Attrs   []etAttr `json:"attrs"`
}

// ReadET reads an execution trace (.et.json or .et.json.gz).
func ReadET(path string) (*ExecTrace, error) {
	data, release, err := readFile(path)
	if err != nil {
		return nil, err
	}
	defer release()
	var doc struct {
		Nodes []etNodeJSON `json:"nodes"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		off := int64(-1)
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			off = se.Offset
		case errors.As(err, &te):
			off = te.Offset
		}
		return nil, &Error{Path: path, Offset: off, Msg: "execution trace: " + err.Error()}
	}
	if doc.Nodes == nil {
		return nil, &Error{Path: path, Offset: -1, Msg: "not an execution trace: no nodes array"}
	}
	et := &ExecTrace{Path: path, Nodes: make([]ETNode, len(doc.Nodes))}
	for i, n := range doc.Nodes {
		node := ETNode{ID: n.ID, Name: n.Name, RFID: -1, Inputs: etTensors(n.Inputs), Outputs: etTensors(n.Outputs)}
		for _, a := range n.Attrs {
			if a.Name == "rf_id" {
				if v, ok := parseInt(strings.TrimSpace(string(a.Value))); ok {
					node.RFID = v
				}
			}
		}
		et.Nodes[i] = node
	}
	return et, nil
}

func etTensors(v etValues) []Tensor {
	if len(v.Values) == 0 {
		return nil
	}
	out := make([]Tensor, len(v.Values))
	for i, raw := range v.Values {
		out[i] = Tensor{ID: -1, Storage: -1}
		isTensor := i < len(v.Types) && strings.HasPrefix(v.Types[i], "Tensor(")
		if i < len(v.Types) && strings.HasPrefix(v.Types[i], "GenericList[Tensor(") {
			out[i].List = etList(raw, v.Types[i])
			continue
		}
		if !isTensor {
			if i < len(v.Types) && v.Types[i] == "String" {
				var text string
				if json.Unmarshal(raw, &text) == nil && len(text) <= 64 {
					out[i].Text = text
				}
			}
			continue
		}
		if t, ok := etTensor(raw); ok {
			t.Elem = elemType(v.Types[i])
			out[i] = t
		}
	}
	return out
}

// etTensor decodes one [tensor_id, storage_id, offset, numel, itemsize, device] value.
func etTensor(raw json.RawMessage) (Tensor, bool) {
	var vals []json.RawMessage
	if json.Unmarshal(raw, &vals) != nil || len(vals) < 6 {
		return Tensor{}, false
	}
	var nums [5]int64
	for k := 0; k < 5; k++ {
		n, ok := parseInt(strings.TrimSpace(string(vals[k])))
		if !ok {
			return Tensor{}, false
		}
		nums[k] = n
	}
	var dev string
	if json.Unmarshal(vals[5], &dev) != nil {
		return Tensor{}, false
	}
	return Tensor{ID: nums[0], Storage: nums[1], Offset: nums[2], Numel: nums[3], ItemSize: nums[4], Device: dev}, true
}

// etList decodes a list of tensors (typ: "GenericList[Tensor(float),Tensor(float)]"); nil
// when any element is not a tensor value.
func etList(raw json.RawMessage, typ string) []Tensor {
	var vals []json.RawMessage
	if json.Unmarshal(raw, &vals) != nil || len(vals) == 0 {
		return nil
	}
	elems := strings.Split(strings.TrimSuffix(strings.TrimPrefix(typ, "GenericList["), "]"), ",")
	out := make([]Tensor, len(vals))
	for k, r := range vals {
		t, ok := etTensor(r)
		if !ok {
			return nil
		}
		if k < len(elems) {
			t.Elem = elemType(elems[k])
		}
		out[k] = t
	}
	return out
}

// elemType is the element type of "Tensor(float)": "float"; "" for anything else.
func elemType(typ string) string {
	if !strings.HasPrefix(typ, "Tensor(") || !strings.HasSuffix(typ, ")") {
		return ""
	}
	return typ[len("Tensor(") : len(typ)-1]
}

// Join maps OpIDs of t to execution-trace nodes with rf_id == Op.RecordFunctionID.
func (et *ExecTrace) Join(t *Trace) map[int32]*ETNode {
	byRF := make(map[int64]*ETNode, len(et.Nodes))
	for i := range et.Nodes {
		if n := &et.Nodes[i]; n.RFID > 0 {
			byRF[n.RFID] = n
		}
	}
	out := map[int32]*ETNode{}
	for i := range t.Ops {
		if rf := t.Ops[i].RecordFunctionID; rf >= 0 {
			if n, ok := byRF[rf]; ok {
				out[int32(i)] = n
			}
		}
	}
	return out
}
