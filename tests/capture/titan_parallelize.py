"""A user's own parallelization, as torchtitan's parallelize_llama applies tensor parallelism
(torchtitan/models/llama3/infra/parallelize.py, apply_tp) with sequence parallelism, written for
Hugging Face's Llama module names: what `scalescope capture --hf-config ... --parallelize
tests/capture/titan_parallelize.py:parallelize` runs instead of the config's shipped plan."""
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)


def parallelize(model, mesh):
    # The layers only: torchtitan's plan also makes the embedding's output Shard(1), but Hugging
    # Face's rotary embedding then computes the tables of this rank's s/t positions only (its
    # own Llama passes the whole sequence's freqs_cis); the run uses the built-in embedding and
    # head for a DTensor capture.
    tp = mesh["tp"]
    for layer in model.model.layers:
        parallelize_module(layer, tp, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        })
