"""Small decoder-style models written the ways public model code is written, for
tests/capture/test_capture.py: a Hugging Face-like layout (blocks at model.layers, a forward
returning a dict with the loss), a dataclass output, logits only, a data-dependent branch, and a
block list nested two levels down. Sizes are tiny; the code is what matters."""
import dataclasses
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        att = att.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, s, d))


class DecoderLayer(nn.Module):
    """Returns a tuple, as Hugging Face's decoder layers do."""

    def __init__(self, dim, heads):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.post_attention_layernorm = nn.LayerNorm(dim)
        self.gate_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.up_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.down_proj = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return (x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)),)


class Backbone(nn.Module):
    def __init__(self, vocab, dim, heads, layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)[0]
        return self.norm(x)


class HfStyle(nn.Module):
    """Blocks at model.layers; forward(input_ids, labels=None) returns a dict with the loss."""

    def __init__(self, vocab=512, dim=64, heads=4, layers=2):
        super().__init__()
        self.model = Backbone(vocab, dim, heads, layers)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.model(input_ids))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                          labels.reshape(-1))
        return out


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None


class DataclassOut(HfStyle):
    """The same model returning a dataclass, logits only (no labels argument)."""

    def forward(self, input_ids):
        return Output(logits=self.lm_head(self.model(input_ids)))


class LogitsOnly(HfStyle):
    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


class Branchy(HfStyle):
    """A Python branch on a tensor's value: cannot be traced over fake tensors."""

    def forward(self, input_ids):
        x = self.model(input_ids)
        if x.sum() > 0:
            x = x * 2
        return self.lm_head(x)


def hf_style_factory():
    """A factory returning the module and example inputs (a dict of the forward's arguments)."""
    model = HfStyle()
    ids = torch.zeros(2, 32, dtype=torch.long)
    return model, {"input_ids": ids, "labels": ids}


# The plan for HfStyle as PyTorch users write it for parallelize_module (strings here: PyTorch
# 1.13 has no torch.distributed.tensor.parallel styles to import); capture.py records it and the
# replay uses it before inferring one.
tp_plan = {
    "self_attn.qkv_proj": "ColwiseParallel",
    "self_attn.o_proj": "RowwiseParallel",
    "gate_proj": "ColwiseParallel",
    "up_proj": "ColwiseParallel",
    "down_proj": "RowwiseParallel",
    "model.embed_tokens": "RowwiseParallel",
    "lm_head": "ColwiseParallel",
}
