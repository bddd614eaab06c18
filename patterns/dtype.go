package patterns

import (
	"strconv"
	"strings"
)

// DType is a tensor element type, as reported to kernel generators. Only the
// values below are ever emitted; anything else the trace says is DTypeUnknown.
type DType string

const (
	DTypeUnknown DType = ""
	FP32         DType = "fp32"
	FP16         DType = "fp16"
	BF16         DType = "bf16"
	FP64         DType = "fp64"
	Int64        DType = "int64"
	Int32        DType = "int32"
	Int16        DType = "int16"
	Int8         DType = "int8"
	UInt8        DType = "uint8"
	Bool         DType = "bool"
)

// Size is the element size in bytes; 0 when unknown.
func (d DType) Size() int64 {
	switch d {
	case FP64, Int64:
		return 8
	case FP32, Int32:
		return 4
	case FP16, BF16, Int16:
		return 2
	case Int8, UInt8, Bool:
		return 1
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == FP32 || d == FP16 || d == BF16 || d == FP64 }

// Kernel reports whether d is one a generated kernel accepts (fp32, fp16, bf16).
func (d DType) Kernel() bool { return d == FP32 || d == FP16 || d == BF16 }

// parseDType maps a profiler "Input type" string to a DType.
func parseDType(s string) DType {
	switch strings.TrimPrefix(s, "c10::") {
	case "float":
		return FP32
	case "Half":
		return FP16
	case "BFloat16":
		return BF16
	case "double":
		return FP64
	case "long int", "long":
		return Int64
	case "int":
		return Int32
	case "short int", "short":
		return Int16
	case "signed char":
		return Int8
	case "unsigned char":
		return UInt8
	case "bool":
		return Bool
	}
	return DTypeUnknown
}

// scalarTypeCode maps a c10::ScalarType number (as Concrete Inputs print a dtype
// argument) to a DType.
func scalarTypeCode(s string) DType {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return DTypeUnknown
	}
	switch n {
	case 0:
		return UInt8
	case 1:
		return Int8
	case 2:
		return Int16
	case 3:
		return Int32
	case 4:
		return Int64
	case 5:
		return FP16
	case 6:
		return FP32
	case 7:
		return FP64
	case 11:
		return Bool
	case 15:
		return BF16
	}
	return DTypeUnknown
}

// rank orders floating types for promotion.
func floatRank(d DType) int {
	switch d {
	case FP16, BF16:
		return 1
	case FP32:
		return 2
	case FP64:
		return 3
	}
	return 0
}

// promote returns the result type of a binary pointwise op on tensors of types a
// and b (both dimensioned tensors): PyTorch's promotion among float types, with
// fp16+bf16 giving fp32; a float beats an integer or bool.
func promote(a, b DType) DType {
	switch {
	case a == DTypeUnknown:
		return b
	case b == DTypeUnknown, a == b:
		return a
	}
	ra, rb := floatRank(a), floatRank(b)
	switch {
	case ra > 0 && rb > 0:
		if ra == rb { // fp16 with bf16
			return FP32
		}
		if ra > rb {
			return a
		}
		return b
	case ra > 0:
		return a
	case rb > 0:
		return b
	case a == Bool:
		return b
	case b == Bool:
		return a
	}
	if a.Size() >= b.Size() {
		return a
	}
	return b
}
