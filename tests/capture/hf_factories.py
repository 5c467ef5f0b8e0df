"""Hugging Face models built from the config.json files in inputs/hf/ (no weights, no network),
for `scalescope capture --factory` (the single-device capture, parallelized by scalescope's
lowering). Qwen3-MoE's experts are 3-D weights; transformers 5 runs them through an "experts
implementation": `grouped_mm` (torch._grouped_mm over the tokens sorted by expert, what
training uses) is traced here; its default eager loop branches on the routing (data-dependent).
"""
import os

import torch

here = os.path.dirname(os.path.abspath(__file__))
inputs = os.path.join(here, "..", "..", "inputs", "hf")


def _build(name, layers, seq, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(os.path.join(inputs, name))
    cfg.num_hidden_layers = layers
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False
    model = AutoModelForCausalLM.from_config(cfg)
    ids = torch.zeros(1, seq, dtype=torch.long)
    return model, {"input_ids": ids, "labels": torch.zeros(1, seq, dtype=torch.long)}


def qwen3_moe_2layers():
    """Qwen3-235B-A22B's config (128 experts, top-8, expert FFN 1536, h 4096, 64 heads of 128,
    4 KV heads), 2 layers, sequence 1024, experts through grouped_mm."""
    return _build("qwen3-235b-a22b-config.json", 2, 1024, _experts_implementation="grouped_mm")


def mixtral_2layers():
    """Mixtral 8x7B's config (8 experts, top-2, FFN 14336, h 4096, 32 heads, 8 KV heads),
    2 layers, sequence 1024, experts through grouped_mm."""
    return _build("mixtral-8x7b-config.json", 2, 1024, _experts_implementation="grouped_mm")


def deepseek_v3_2layers():
    """DeepSeek-V3's config (multi-latent attention: q_lora_rank 1536, kv_lora_rank 512, 128
    heads of 128 + 64 rotary, values 128; 256 routed experts top-8 of 4 best of 8 groups, 1
    shared expert, expert FFN 2048; router in fp32), 2 layers, both MoE (first_k_dense_replace 0:
    the captured block is repeated, and the published model's 3 dense layers are another block
    class), sequence 1024, experts through grouped_mm."""
    return _build("deepseek-v3-config.json", 2, 1024, first_k_dense_replace=0,
                  _experts_implementation="grouped_mm")
