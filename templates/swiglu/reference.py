"""The eager chain swiglu replaces, as traced: aten::silu -> aten::mul."""

import torch.nn.functional as F


def swiglu(gate, up):
    return F.silu(gate) * up
