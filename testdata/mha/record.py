"""Records mha_transformer_train_cpu.json.gz: one training step of a tiny nn.Transformer
(encoder and decoder layers, batch_first, so its nn.MultiheadAttention runs self-attention
and the decoder's attention to the memory), on the CPU with shapes recorded: the Kineto
trace patterns/mha_test.go reads for nn.MultiheadAttention's packed projection splits (the
ops and their backward nodes; a CPU trace has no kernels).

    python testdata/mha/record.py      (torch 2.11; writes next to this file)
"""

import gzip
import json
import os
import pathlib
import tempfile

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent


def main():
    torch.manual_seed(0)
    model = nn.Transformer(32, 4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.1,
                           batch_first=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    src, tgt = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    def step():
        out = model(src, tgt, tgt_mask=causal, tgt_is_causal=True)
        out.square().mean().backward()
        opt.step()
        opt.zero_grad()

    step()  # warm-up, outside the trace
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.profiler.record_function("ProfilerStep#1"):
            step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        trace = json.load(open(path))
    for key in ("deviceProperties", "distributedInfo"):
        trace.pop(key, None)
    trace.pop("baseTimeNanoseconds", None)
    with gzip.GzipFile(HERE / "mha_transformer_train_cpu.json.gz", "wb", mtime=0) as f:
        f.write(json.dumps(trace, separators=(",", ":")).encode())


if __name__ == "__main__":
    main()
