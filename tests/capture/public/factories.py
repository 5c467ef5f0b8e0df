"""Factories for `scalescope capture --factory` over the public model files beside this one, at
small sizes (each returns the module and its example inputs, as a user's own factory would). The
model files are as published (README.md); what a factory does is what their own scripts do
before a forward: gpt-fast's generate.py calls setup_caches, and training needs no KV cache."""
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))


def _load(folder, module_name, file="model.py"):
    import importlib.util
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(here, folder, file))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


# Sizes shared by the dense models: h 256, 8 heads of 32, 2 KV heads (GQA), vocabulary 512,
# sequence 256, 2 layers.
H, HEADS, KV, V, S, LAYERS = 256, 8, 2, 512, 256, 2


def llama2c():
    """llama2.c's Llama 2 (model.py's Transformer): forward(tokens, targets) keeps the loss in
    self.last_loss and returns the logits. FFN: multiple_of 32 gives hidden 2/3·4h → 704."""
    m = _load("llama2c", "llama2c_model")
    args = m.ModelArgs(dim=H, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV, vocab_size=V,
                       multiple_of=32, max_seq_len=S)
    model = m.Transformer(args)
    tokens = torch.zeros(1, S, dtype=torch.long)
    return model, {"tokens": tokens, "targets": torch.zeros(1, S, dtype=torch.long)}


def _gpt_fast(m, **extra):
    args = m.ModelArgs(block_size=S, vocab_size=V, n_layer=LAYERS, n_head=HEADS, dim=H,
                       n_local_heads=KV, intermediate_size=704, **extra)
    model = m.Transformer(args)
    model.setup_caches(1, S)  # the RoPE table and the causal mask, as generate.py does
    for layer in model.layers:
        layer.attention.kv_cache = None  # training: no KV cache
    return model, (torch.zeros(1, S, dtype=torch.long), torch.arange(S))


def gpt_fast():
    """gpt-fast's dense model: its causal mask is a plain attribute (tril of ones, bool) that
    forward indexes by input_pos and hands to scaled_dot_product_attention as attn_mask."""
    return _gpt_fast(_load("gpt_fast", "gpt_fast_model"))


def gpt_fast_moe():
    """gpt-fast's Mixtral: 8 experts, top-2, whose 3-D weights [E, f, h] are gathered by the
    router's indices and applied with einsum."""
    return _gpt_fast(_load("gpt_fast_moe", "gpt_fast_moe_model"), num_experts=8,
                     num_activated_experts=2)


def gpt_oss():
    """gpt-oss (gpt_oss/torch/model.py): 8 experts top-2 with 3-D weights gathered by index, the
    router's softmax over its top-k beside the expert einsums, every other layer a 64-token
    sliding window, attention sinks. Its forward takes 1-D token ids."""
    sys.path.insert(0, os.path.join(here, "gpt_oss_pkg"))
    from gpt_oss.torch.model import ModelConfig, Transformer
    cfg = ModelConfig(num_hidden_layers=LAYERS, num_experts=8, experts_per_token=2,
                      vocab_size=V, hidden_size=H, intermediate_size=H, head_dim=32,
                      num_attention_heads=HEADS, num_key_value_heads=KV, sliding_window=64)
    return Transformer(cfg), (torch.zeros(S, dtype=torch.long),)
