"""A Llama-style decoder (Meta's llama/model.py, 2023, written the same way): RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU feed-forward, untied output layer.

Constructor arguments follow Llama's ModelArgs; shipped sizes: inputs/pytorch/*.yaml.
`fused_projections: true` writes the projections the way Megatron-LM and Phi-3 do: one `wqkv`
and one gate-and-up `w13` Linear, split after the GEMM.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def apply_rotary(x, cos, sin):
    # x: [b, s, heads, head_dim]; rotate the two halves of each head
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def repeat_kv(x, n_rep):
    b, s, kv, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(b, s, kv, n_rep, d).reshape(b, s, kv * n_rep, d)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, fused_projections=False):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = dim // n_heads
        self.fused = fused_projections
        if self.fused:
            self.wqkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False)
        else:
            self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
            self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
            self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        if self.fused:
            kv = self.n_kv_heads * self.head_dim
            q, k, v = self.wqkv(x).split([self.n_heads * self.head_dim, kv, kv], dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q = q.view(b, s, self.n_heads, self.head_dim)
        k = k.view(b, s, self.n_kv_heads, self.head_dim)
        v = v.view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k = repeat_kv(k, self.n_heads // self.n_kv_heads)
        v = repeat_kv(v, self.n_heads // self.n_kv_heads)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.full((s, s), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
        probs = F.softmax((scores + mask).float(), dim=-1).type_as(q)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, fused_projections=False):
        super().__init__()
        self.fused = fused_projections
        if self.fused:
            self.w13 = nn.Linear(dim, 2 * hidden_dim, bias=False)
        else:
            self.w1 = nn.Linear(dim, hidden_dim, bias=False)
            self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        if self.fused:
            gate, up = self.w13(x).chunk(2, dim=-1)
        else:
            gate, up = self.w1(x), self.w3(x)
        return self.w2(F.silu(gate) * up)


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn_dim, norm_eps, fused_projections=False):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, fused_projections)
        self.feed_forward = FeedForward(dim, ffn_dim, fused_projections)
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.ffn_norm = RMSNorm(dim, norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                 ffn_dim=14336, norm_eps=1e-5, rope_theta=500000.0, max_seq_len=8192,
                 fused_projections=False):
        super().__init__()
        self.head_dim = dim // n_heads
        self.rope_theta = rope_theta
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, ffn_dim, norm_eps, fused_projections)
            for _ in range(n_layers))
        self.norm = RMSNorm(dim, norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)

    def rotary(self, seq_len, device, dtype):
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, device=device).float()
                                        / self.head_dim))
        t = torch.arange(seq_len, device=device).float()
        freqs = torch.outer(t, inv)
        emb = torch.cat((freqs, freqs), dim=-1)[None, :, None, : self.head_dim // 2]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        cos, sin = self.rotary(tokens.shape[1], h.device, h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h)).float()
