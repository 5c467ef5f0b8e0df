#!/usr/bin/env python3
"""Capture of a Hugging Face model from its config.json, tensor-parallelized by PyTorch's own
DTensor (issue 39): no weights, no network, no GPU. The model is built with transformers'
AutoModelForCausalLM.from_config over fake tensors; a fake process group of --world ranks and a
(dp, tp) device mesh stand in for the cluster; the config's shipped base_model_tp_plan is applied
with torch.distributed.tensor.parallel.parallelize_module (ColwiseParallel / RowwiseParallel),
with sequence parallelism as torchtitan adds it (SequenceParallel norms, PrepareModuleInput
before the column-wise projections, row-wise outputs Shard(1)). The joint forward + backward
graph of one decoder layer is traced with make_fx; its collectives are the ones PyTorch itself
issues, `_c10d_functional` ops with their group size and local shapes.

    capture_hf.py CONFIG.json --world N --tp T [--sp] [--layers L] [--seq S] [--batch B] -o OUT.h5

Writes capture.h5 (format 1) with /block (local, per-rank shapes), an empty /outer (the run uses
the built-in embedding and head), and /meta: parallelized = "dtensor", tp, sp, world, the model's
shape keys from the config (shapes_json) and the block's parameters before sharding
(block_parameters)."""
import argparse
import contextlib
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture as cap  # noqa: E402  (describe, write, trace, ModuleTracker, CaptureError)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch._subclasses import FakeTensorMode  # noqa: E402

CaptureError = cap.CaptureError


class _GradAllReduce(torch.autograd.Function):
    """Identity forward; the gradient all-reduced over the TP group backward (a functional
    collective, so it is in the traced graph)."""

    @staticmethod
    def forward(ctx, w, group):
        ctx.group = group
        return w.view_as(w)

    @staticmethod
    def backward(ctx, g):
        import torch.distributed._functional_collectives as funcol
        return funcol.all_reduce(g, "sum", ctx.group), None


def replicated_with_grad_allreduce():
    """Hugging Face's `replicated_with_grad_allreduce` (Qwen3's per-head q_norm / k_norm): the
    weight stays whole on every rank, reads this rank's heads, and its gradient is summed over
    TP."""
    from torch.distributed.tensor.parallel import ParallelStyle

    class Style(ParallelStyle):
        def _apply(self, module, device_mesh):
            group = device_mesh.get_group()
            forward = module.forward

            def wrapped(*args, **kwargs):
                weight = module._parameters["weight"]  # as functional_call set it
                module._parameters["weight"] = _GradAllReduce.apply(weight, group)
                try:
                    return forward(*args, **kwargs)
                finally:
                    module._parameters["weight"] = weight
            module.forward = wrapped
            return module
    return Style()


def mla_kv_a_proj(rope_dim):
    """Hugging Face's `mla_kv_a_proj` (MlaKvAProjParallel, DeepSeek's kv_a_proj_with_mqa): the
    projection stays whole on every TP rank; the rotary key it produces bypasses the column-wise
    kv_b_proj, so its gradient (partial: each rank's heads) is all-reduced over TP."""
    from torch.distributed.tensor.parallel import ParallelStyle

    class Style(ParallelStyle):
        def _apply(self, module, device_mesh):
            group = device_mesh.get_group()
            forward = module.forward

            def wrapped(*args, **kwargs):
                out = forward(*args, **kwargs)
                kv, rope = out.split([out.shape[-1] - rope_dim, rope_dim], dim=-1)
                return torch.cat([kv, _GradAllReduce.apply(rope, group)], dim=-1)
            module.forward = wrapped
            return module
    return Style()


def tp_styles(config, tp, sp, layer):
    """The config's base_model_tp_plan as parallelize_module styles for one decoder layer (keys
    relative to the layer), with torchtitan's sequence-parallel additions when `sp`. Keys naming
    nothing in this layer are left out (an MoE model's plan also covers its dense MLPs)."""
    present = {n for n, _ in layer.named_modules()}
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    shipped = dict(getattr(config, "base_model_tp_plan", None) or {})
    if not shipped:
        raise CaptureError(f"{config.model_type}: the config ships no base_model_tp_plan")
    plan, parents = {}, set()
    for key, style in shipped.items():
        if not key.startswith("layers.*."):
            continue  # embeddings and head: the run uses the built-in ones
        rel = key[len("layers.*."):]
        if rel not in present:
            continue
        if style in ("colwise", "colwise_rep"):
            plan[rel] = ColwiseParallel()
            parents.add(rel.rpartition(".")[0])
        elif style == "rowwise" or style == "rowwise_rep":
            plan[rel] = RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel()
        elif style == "replicated_with_grad_allreduce":
            plan[rel] = replicated_with_grad_allreduce()
        elif style == "mla_kv_a_proj":
            plan[rel] = mla_kv_a_proj(config.qk_rope_head_dim)
        else:
            raise CaptureError(f"{config.model_type}: base_model_tp_plan style '{style}' of "
                               f"{key} is not read yet (colwise and rowwise are)")
    return plan, parents


def hf_model(config_path, layers, mode):
    """(model, config, shape keys, where) of a Hugging Face config.json, built over fake tensors."""
    from transformers import AutoConfig, AutoModelForCausalLM
    where = config_path
    try:
        config = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(config_path)) if
                                            os.path.basename(config_path) == "config.json"
                                            else config_path)
    except Exception as e:
        raise CaptureError(f"{where}: not a Hugging Face config ({type(e).__name__}: "
                           f"{cap.one_line(e)})")
    if layers:
        config.num_hidden_layers = layers
    config._attn_implementation = "sdpa"
    config.use_cache = False
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if experts:
        # transformers' experts "implementation" for training: torch._grouped_mm over the tokens
        # sorted by expert (its default eager loop branches on the routing).
        config._experts_implementation = "grouped_mm"
    h = config.hidden_size
    heads = config.num_attention_heads
    shapes = {"hidden_size": h, "num_attention_heads": heads,
              "num_query_groups": getattr(config, "num_key_value_heads", None) or heads,
              "kv_channels": getattr(config, "head_dim", None) or h // heads,
              "ffn_hidden_size": config.intermediate_size,
              "num_layers": config.num_hidden_layers, "vocab_size": config.vocab_size,
              "gated_linear_unit": getattr(config, "hidden_act", "") in ("silu", "swiglu"),
              "add_bias_linear": bool(getattr(config, "attention_bias", False) or
                                      getattr(config, "mlp_bias", False)),
              "position_embedding_type": "rope",
              "untie_embeddings": not bool(getattr(config, "tie_word_embeddings", False))}
    if experts:
        shapes.update({"num_experts": experts, "moe_router_topk": config.num_experts_per_tok,
                       "moe_ffn_hidden_size": getattr(config, "moe_intermediate_size", None) or
                       config.intermediate_size})
        if getattr(config, "n_shared_experts", None):
            shapes["moe_shared_expert_intermediate_size"] = \
                config.n_shared_experts * config.moe_intermediate_size
        if (getattr(config, "n_group", None) or 1) > 1:  # group-limited routing (DeepSeek-V3)
            shapes.update({"moe_router_num_groups": config.n_group,
                           "moe_router_group_topk": config.topk_group})
    if getattr(config, "kv_lora_rank", None):
        # Multi-latent attention (DeepSeek-V2/V3), in Megatron's keys: qk_head_dim is the
        # non-rotary part of a query / key head.
        shapes.pop("kv_channels")
        shapes.update({"multi_latent_attention": True, "num_query_groups": heads,
                       "q_lora_rank": config.q_lora_rank or 0,
                       "kv_lora_rank": config.kv_lora_rank,
                       "qk_head_dim": config.qk_nope_head_dim,
                       "qk_pos_emb_head_dim": config.qk_rope_head_dim,
                       "v_head_dim": config.v_head_dim})
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # Module.to swaps fake tensors and fails on 2.x
    try:
        with mode:
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:
        raise CaptureError(f"{where}: from_config failed: {type(e).__name__}: {cap.one_line(e)}")
    finally:
        torch.set_default_dtype(default)
    return model, config, shapes, where


def factory_model(factory, layers, mode):
    """(model, None, shape keys, where) from FILE.py:FUNCTION(layers) returning the module and
    its shape keys (hidden_size, num_attention_heads, num_query_groups, kv_channels,
    ffn_hidden_size, num_layers, vocab_size, gated_linear_unit, add_bias_linear,
    position_embedding_type, untie_embeddings), built over fake tensors in bf16."""
    fn = cap.load_attr(factory, "FUNCTION", "function")
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with mode:
            made = fn(layers)
    except Exception as e:
        raise CaptureError(f"{factory}: the factory failed: {type(e).__name__}: "
                           f"{cap.one_line(e)}")
    finally:
        torch.set_default_dtype(default)
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)
            and isinstance(made[1], dict)):
        raise CaptureError(f"{factory}: expected (module, shape keys), got "
                           f"{type(made).__name__}")
    return made[0], None, made[1], factory


def fsdp_plan(layer, mesh, reshard):
    """FSDP2 on the layer as torchtitan applies it (fully_shard over the dp mesh dimension,
    bf16 parameters, fp32 gradient reduction: torchtitan's mixed_precision_param /
    mixed_precision_reduce defaults), read back from PyTorch's own FSDPParamGroup: what its
    all-gather and reduce-scatter move per layer. Applied after the layer's graph is traced
    (FSDP2's collectives come from hooks, outside autograd's graph)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=reshard,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                               reduce_dtype=torch.float32))
    group = layer._get_fsdp_state()._fsdp_param_group
    shard = group.mesh_info.mesh.size()
    gathered = sum(int(torch.Size(p.padded_sharded_param_size).numel()) for p in
                   group.fsdp_params) * shard
    size = {torch.bfloat16: 2, torch.float32: 4, torch.float16: 2}
    mp = group.mp_policy
    return {"shard": shard, "params": len(group.fsdp_params),
            "all_gather_bytes": gathered * size[mp.param_dtype],
            "reduce_scatter_bytes": gathered * size[mp.reduce_dtype],
            "reshard_after_forward": group.post_forward_mesh_info is not None,
            "param_dtype": str(mp.param_dtype).replace("torch.", ""),
            "reduce_dtype": str(mp.reduce_dtype).replace("torch.", ""),
            "source": "FSDPParamGroup of fully_shard(layer, mesh=dp)"}


def ep_plan(config, layer):
    """The config's base_model_ep_plan for one decoder layer (keys relative to it: the names
    transformers' apply_expert_parallelism looks up)."""
    shipped = dict(getattr(config, "base_model_ep_plan", None) or {})
    if not shipped:
        raise CaptureError(f"{config.model_type}: the config ships no base_model_ep_plan")
    names = {n for n, _ in layer.named_modules()} | {n for n, _ in layer.named_parameters()}
    plan = {}
    for key, style in shipped.items():
        rel = key[len("layers.*."):] if key.startswith("layers.*.") else None
        if rel is None or rel not in names:
            raise CaptureError(f"{config.model_type}: base_model_ep_plan key {key} names nothing "
                               "in the decoder layer")
        plan[rel] = style
    if "ep_dispatch_experts" not in plan.values():
        raise CaptureError(f"{config.model_type}: base_model_ep_plan has no ep_dispatch_experts "
                           "rule (how tokens reach the experts)")
    return plan


class BalancedSplits:
    """transformers' AllToAllEP reads the all-to-all's split sizes back to the host every layer
    (`.tolist()` of the per-rank token counts): data the fake run does not have. Inside its
    dispatch, those sizes are the balanced routing's, T·k / ep rows to and from every EP rank
    (the assumption scalescope's own EP lowering makes; said in capture.h5 and the summary)."""

    def __init__(self, tp, ep):
        from transformers.distributed.expert_parallel import AllToAllEP
        self.cls, self.tp, self.ep, self.rows = AllToAllEP, tp, ep, None

    def __enter__(self):
        cls, me = self.cls, self
        from torch._subclasses.fake_tensor import FakeTensor
        self.fake = FakeTensor  # defines its own tolist
        self.dispatch, self.tolist = cls._dispatch_tokens, FakeTensor.tolist

        def dispatch(inst, hidden_states, top_k_index, top_k_weights):
            n, k = hidden_states.size(0), top_k_index.size(-1)
            me.rows = -(-n // me.tp) * k  # Shard(0) over TP: this rank's (the first) share
            try:
                return me.dispatch(inst, hidden_states, top_k_index, top_k_weights)
            finally:
                me.rows = None

        def tolist(t):
            if me.rows is not None and t.dim() == 2 and tuple(t.shape) == (2, me.ep):
                share = [me.rows // me.ep + (1 if r < me.rows % me.ep else 0)
                         for r in range(me.ep)]
                return [share, list(share)]
            return me.tolist(t)
        cls._dispatch_tokens, self.fake.tolist = dispatch, tolist
        return self

    def __exit__(self, *_):
        self.cls._dispatch_tokens, self.fake.tolist = self.dispatch, self.tolist


def capture_hf(config_path, world, tp, sp, layers, seq, batch, parallelize="", factory="",
               fsdp=False, ep=1):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import (PrepareModuleInput, SequenceParallel,
                                                   parallelize_module)
    from torch.testing._internal.distributed.fake_pg import FakeStore
    t0 = time.time()
    where = config_path or factory
    if factory and not parallelize:
        raise CaptureError(f"{factory}: a factory's model is parallelized by --parallelize "
                           "(it ships no base_model_tp_plan)")
    if world % tp != 0:
        raise CaptureError(f"{where}: --world {world} is not a multiple of --tp {tp}")
    if sp and seq % tp != 0:
        raise CaptureError(f"{where}: --seq {seq} is not a multiple of --tp {tp} (SP)")
    if ep > 1 and (ep % tp != 0 or world % ep != 0):
        raise CaptureError(f"{where}: --ep {ep} must be a multiple of --tp {tp} and divide "
                           f"--world {world} (transformers' EP groups hold whole TP groups)")
    mode = FakeTensorMode()
    model, config, shapes, where = factory_model(factory, layers, mode) if factory \
        else hf_model(config_path, layers, mode)
    heads, kv = shapes["num_attention_heads"], shapes["num_query_groups"]
    if heads % tp or kv % tp:
        raise CaptureError(f"{where}: {heads} attention heads and {kv} key/value heads must "
                           f"both be multiples of --tp {tp} (ColwiseParallel splits heads)")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    if ep > 1:
        # transformers' layout (DistributedConfig.efsdp_size): an EP group is ep consecutive
        # ranks, whole TP groups; the ranks holding the same experts are ep apart.
        mesh = init_device_mesh("cpu", (world // ep, ep // tp, tp),
                                mesh_dim_names=("edp", "ep_dp", "tp"))
        mesh["edp", "ep_dp"]._flatten("dp")
        ep_mesh = mesh["ep_dp", "tp"]._flatten("ep")
    else:
        mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
    model.train()
    blocks_path, blocks = cap.find_blocks(model, "", where)
    layer = blocks["0"] if isinstance(blocks, torch.nn.ModuleDict) else blocks[0]
    kinds = [type(getattr(b, "mlp", None)).__name__ for b in
             (blocks.values() if isinstance(blocks, torch.nn.ModuleDict) else blocks)]
    if len(set(kinds)) > 1:
        raise CaptureError(f"{where}: its decoder layers differ ({', '.join(sorted(set(kinds)))}"
                           ": dense and MoE layers, e.g. first_k_dense_replace / mlp_only_layers);"
                           " one block class is captured: make them alike in the config")
    block_parameters = sum(p.numel() for p in layer.parameters())
    if parallelize:
        # The user's own parallelization, as their training script runs it: FUNCTION(model,
        # mesh) over the (dp, tp) mesh; sequence parallelism is what it does (--sp says the
        # layers take this rank's sequence share).
        fn = cap.load_attr(parallelize, "FUNCTION", "function")
        try:
            with mode:
                fn(model, mesh)
        except Exception as e:
            raise CaptureError(f"{parallelize}: the parallelize function failed: "
                               f"{type(e).__name__}: {cap.one_line(e)}")
        from torch.distributed.fsdp import FSDPModule
        if isinstance(layer, FSDPModule):
            raise CaptureError(f"{parallelize}: applies fully_shard itself; apply tensor "
                               "parallelism there and FSDP2 with --fsdp (capture reads FSDP2's "
                               "parameter groups, whose collectives run outside the graph)")
        if not any(isinstance(p, DTensor) for p in layer.parameters()):
            raise CaptureError(f"{parallelize}: left {blocks_path}.0 unsharded (no DTensor "
                               "parameter): nothing to capture at --tp")
    # One fake forward of the model with this layer alone gives the layer's inputs (the rotary
    # tables, the mask) and, for sequence parallelism, how each parent of a column-wise
    # projection is called (positionally or by keyword: the sequence-parallel layout goes where
    # the hidden states are handed). It stops before the layer runs, or after it when the parents
    # are watched (the layer is not parallelized yet then).
    styles, parents = ({}, set()) if parallelize else tp_styles(config, tp, sp, layer)
    probe = sp and not parallelize
    calls, seen = {}, {}

    class Stop(Exception):
        pass

    def stop(*_):
        raise Stop()

    def grab(m, a, k):
        seen.setdefault("kw", (a, k))

    def called(p):
        def hook(m, a, k):
            calls.setdefault(p, "hidden_states" in k)
        return hook
    cap.set_submodule(model, blocks_path, cap.block_list(blocks, [layer]))
    hooks = [layer.register_forward_pre_hook(grab, with_kwargs=True)]
    hooks += [layer.get_submodule(p).register_forward_pre_hook(called(p), with_kwargs=True)
              for p in parents] if probe else []
    hooks.append(layer.register_forward_hook(stop) if probe
                 else layer.register_forward_pre_hook(stop, with_kwargs=True))
    with mode:
        ids = torch.zeros(batch, seq, dtype=torch.long)
        try:
            model(ids)
        except Stop:
            pass
        except Exception as e:
            raise CaptureError(f"{where}: forward: {type(e).__name__}: {cap.one_line(e)}")
        finally:
            for hk in hooks:
                hk.remove()
    if probe:
        for p in parents:
            styles[p] = PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}) if calls.get(p) \
                else PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),))
        for name, m in layer.named_modules():
            if name and "norm" in type(m).__name__.lower() and name.count(".") == 0:
                styles[name] = SequenceParallel()
    for st in styles.values():
        st.src_data_rank = None  # no scatter of (fake) initial values
    moe = "num_experts" in shapes
    if moe and parallelize:
        raise CaptureError(f"{parallelize}: an MoE model through the user's parallelize "
                           "function is not read yet (the config's plans are)")
    if moe and sp:
        raise CaptureError(f"{where}: an MoE model with --sp: transformers' EP dispatch takes "
                           "replicated hidden states (not read yet with sequence parallelism)")
    if ep > 1 and not moe:
        raise CaptureError(f"{where}: --ep {ep} but the model has no experts")
    if not parallelize:
        with mode:
            if styles:
                parallelize_module(layer, tp_mesh, styles)
            if ep > 1:
                from transformers.distributed.expert_parallel import apply_expert_parallelism
                apply_expert_parallelism(layer, ep_mesh, tp_mesh, ep_plan(config, layer),
                                         ep_implementation="all_to_all")
    # The layer's inputs but the hidden states (this rank's sequence share is made below).
    args, kwargs = seen["kw"]
    kwargs = dict(kwargs)
    if args:
        args = args[1:]
    else:
        kwargs.pop("hidden_states")
    names, plocals, specs = [], [], []
    for n, p in layer.named_parameters():
        names.append(n)
        if isinstance(p, DTensor):
            plocals.append(p.to_local().detach().requires_grad_(True))
            specs.append((p.device_mesh, p.placements, p.shape, p.stride()))
        else:
            plocals.append(p.detach().requires_grad_(True))
            specs.append(None)
    s_local = seq // tp if sp else seq
    with mode:
        x = torch.empty(batch, s_local, shapes["hidden_size"], dtype=torch.bfloat16,
                        requires_grad=True)

    def joint(pvals, x, *rest):
        state = {}
        for n, t, spec in zip(names, pvals, specs):
            state[n] = t if spec is None else DTensor.from_local(
                t, spec[0], spec[1], run_check=False, shape=spec[2], stride=spec[3])
        out = torch.func.functional_call(layer, state, (x,) + tuple(rest), kwargs)
        out = cap.first_tensor(out)
        if isinstance(out, DTensor):
            out = out.to_local()
        grads = torch.autograd.grad(out, [x] + list(pvals), torch.ones_like(out),
                                    allow_unused=True)
        return out, grads
    tracker = cap.ModuleTracker(layer)
    try:
        with BalancedSplits(tp, ep) if ep > 1 else contextlib.nullcontext():
            gm = cap.traced(where, "layer", lambda: cap.trace(joint, (plocals, x) + tuple(args),
                                                               tracker, mode))
    finally:
        tracker.remove()
    gm.graph.eliminate_dead_code()  # DTensor's sharding propagation leaves dead global-shape ops
    gm.recompile()
    prefix = f"{blocks_path}.0."
    pnames = [prefix + n for n in names]
    # Hugging Face hands SDPA a materialized mask (where over a boolean one); its attention
    # modules declare is_causal, so that mask is a causal one (model.causal_mask decides its cost).
    causal = any(getattr(m, "is_causal", False) for m in layer.modules())
    mask = kwargs.get("attention_mask")

    class HfMasks:
        @staticmethod
        def kind(t):
            return "causal" if causal and mask is not None and t is mask else ""
    nodes = cap.describe(gm, pnames, 2, masks=HfMasks())
    fusion = {"block": cap.inductor_kernels(gm, nodes, mode)}
    for d in nodes:  # the tracker names modules from the layer: make them the model's paths
        if d["module"] is not None and not d["module"].startswith(prefix):
            d["module"] = prefix + d["module"] if d["module"] else prefix.rstrip(".")
    for d, n in zip(nodes, gm.graph.nodes):
        target = str(n.target)
        if n.op == "call_function" and target.startswith("c10d.alltoall_base_"):
            # transformers' AllToAllEP exchanges the per-expert token counts in place before the
            # host reads the split sizes: a small all-to-all the host waits for.
            d["group_size"] = dist.ProcessGroup.unbox(getattr(gm, n.args[2].target)).size()
        elif n.op == "call_function" and target.startswith("c10d."):
            raise CaptureError(f"{where}: PyTorch issued an in-place collective ({target}) "
                               "outside the functional collectives: not read yet")
        if n.op == "call_function" and target.startswith("_c10d_functional.") and \
                "wait_tensor" not in target:
            group = next(a for a in reversed(n.args) if isinstance(a, str))
            d["group_size"] = dist.distributed_c10d._resolve_process_group(group).size()
    shapes = dict(shapes, seq_length=seq)
    fsdp_meta = None
    if fsdp:  # outside the fake mode: FSDP2 builds a (dp, tp) mesh of real rank tensors
        fsdp_meta = cap.traced(where, "fully_shard", lambda: fsdp_plan(layer, mesh, True))
    meta = {"format_version": cap.FORMAT_VERSION, "model": config_path or factory,
            "class": type(model).__name__, "args": json.dumps({"layers": layers}),
            "torch_version": torch.__version__, "batch": batch, "seq": seq, "dtype": "bf16",
            "blocks_attr": blocks_path, "num_blocks": shapes["num_layers"],
            "vocab_size": shapes["vocab_size"], "loss": "builder",
            "capture_seconds": time.time() - t0, "parallelized": "dtensor", "tp": tp,
            "sp": int(sp), "world": world, "ep": ep, "shapes_json": json.dumps(shapes),
            "fusion_json": json.dumps(fusion),
            "block_parameters": block_parameters,
            **({"fsdp_json": json.dumps(fsdp_meta)} if fsdp_meta else {}),
            "tp_plan_source": f"{parallelize} (the user's parallelize function)" if parallelize
            else "the config's base_model_tp_plan, applied by parallelize_module"
                 + (" with torchtitan's sequence parallelism" if sp else "")
                 + (f"; its base_model_ep_plan by transformers' apply_expert_parallelism (EP "
                    f"{ep}, all_to_all; split sizes of balanced routing: the fake run has no "
                    "token counts)" if ep > 1 else "")}
    return meta, nodes


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", default="", help="a Hugging Face config.json")
    p.add_argument("--factory", default="", help="FILE.py:FUNCTION(layers) returning the module "
                   "and its shape keys (a model that is not Hugging Face's: torchtitan's), "
                   "instead of a config; needs --parallelize")
    p.add_argument("--world", type=int, required=True, help="ranks of the fake process group")
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel degree")
    p.add_argument("--sp", action="store_true", help="sequence parallelism")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel degree (MoE models: the "
                   "config's base_model_ep_plan applied by transformers' "
                   "apply_expert_parallelism, tokens exchanged by all-to-all)")
    p.add_argument("--layers", type=int, default=0, help="num_hidden_layers (default: the config's)")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--parallelize", default="", help="FILE.py:FUNCTION(model, mesh) that "
                   "parallelizes the model as the user's training script does (mesh dims dp, "
                   "tp), instead of the config's base_model_tp_plan")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) on the layers over "
                   "the dp mesh dimension, as torchtitan applies it; its parameter groups are "
                   "recorded")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    for flag, v in (("--world", a.world), ("--tp", a.tp), ("--ep", a.ep), ("--seq", a.seq),
                    ("--batch", a.batch)):
        if v <= 0:
            p.error(f"{flag} must be positive")
    try:
        if bool(a.config) == bool(a.factory):
            p.error("give a config.json or --factory FILE.py:FUNCTION")
        meta, nodes = capture_hf(a.config, a.world, a.tp, a.sp, a.layers, a.seq, a.batch,
                                 a.parallelize, a.factory, a.fsdp, a.ep)
        cap.write(a.output, meta, nodes, [])
    except CaptureError as e:
        print(f"capture: error: {e}", file=sys.stderr)
        return 2
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    colls = sum(1 for d in nodes if "_c10d_functional" in d["op"] and "wait" not in d["op"])
    print(f"captured {meta['class']} ({a.config or a.factory}) with DTensor TP {a.tp}{' + SP' if a.sp else ''}"
          f" on a fake {a.world}-rank world: block {len(nodes)} nodes, {colls} collectives, "
          f"× {meta['num_blocks']} in {meta['capture_seconds']:.2f} s, {rss:.0f} MiB max RSS "
          f"→ {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
