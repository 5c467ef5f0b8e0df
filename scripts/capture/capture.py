#!/usr/bin/env python3
"""Flint-style capture (issue 11 part 1): the ATen-level joint forward+backward graph of a user's
own PyTorch model, traced with make_fx over fake tensors (no weights are ever allocated), written
to capture.h5 for scalescope.

    capture.py path/to/model.py:ClassName [--args args.yaml] [--batch B] [--seq S]
               [--dtype bf16|fp32] [--blocks PATH] -o capture.h5
    capture.py --factory path/to/file.py:FUNCTION [--batch B] [--seq S] ... -o capture.h5

The model comes from its class (constructor keywords from --args) or from a factory function that
takes no arguments and returns the module, or the module and example inputs (a tuple or a dict of
the forward's arguments); without them the forward gets token ids [batch, seq] (and, where its
signature names `targets` or `labels`, labels of the same shape). The repeated blocks are the
largest nn.ModuleList of modules of one class found anywhere in the module tree
(`transformer.h`, `model.layers`, `layers`), or the one --blocks names by its dotted path.

Two graphs are captured:
  /block  one repeated transformer block (the first module of the ModuleList named by --blocks),
          forward and backward, with the inputs it receives inside the full model (found by a
          forward pre-hook on a fake run);
  /outer  everything else — embedding, final norm, output layer and the cross-entropy loss —
          traced with a marker in place of the block list (one aten.alias node, module path
          "<blocks>.0", on the hidden states entering the first block), forward and backward.
Every node keeps its ATen op, its inputs (data dependencies, as node indices), output shapes and
dtypes, and the module path it came from: forward ops from forward hooks, backward ops from the
parameter they read through view-like ops. Works with PyTorch 1.13 (make_fx + FakeTensorMode);
on 2.x the same calls exist.
"""
import argparse
import dataclasses
import importlib.util
import inspect
import json
import logging
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
try:  # PyTorch 2.x: make_fx imports torch._dynamo while it traces, which must not happen inside
    import torch._dynamo  # noqa: F401  the fake mode (its own comment); import it up front.
except ImportError:  # PyTorch 1.13 has none
    pass
from torch.fx.experimental.proxy_tensor import make_fx
# A model's own error under fake tensors is reported in one line (CaptureError); PyTorch 2.x
# would also log its traceback.
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
from torch._subclasses import FakeTensorMode
try:  # PyTorch 2.x
    from torch.func import functional_call
except ImportError:  # PyTorch 1.13
    from torch.nn.utils.stateless import functional_call

FORMAT_VERSION = 1
# Ops that only re-view a tensor: a backward op reading a parameter through them belongs to the
# parameter's module.
VIEW_OPS = {"t", "view", "_reshape_alias", "_unsafe_view", "transpose", "expand", "detach",
            "permute", "reshape", "unsqueeze", "squeeze", "slice", "alias", "_to_copy"}


class CaptureError(Exception):
    pass


class BlocksMarker(nn.Module):
    """Stands where the repeated blocks run when /outer is traced: its one aten.alias node (module
    path "<blocks>.0") names the hidden states that enter the first block, the boundary between
    what runs before the blocks (embedding) and after them (final norm, head, loss). It returns
    what a block returns: the hidden states, or a tuple with them first (Hugging Face's layers),
    the rest as the real block gave them."""

    def __init__(self, rest=None):
        super().__init__()
        self.rest = rest  # None: the block returns a tensor; else the tuple's other elements

    def forward(self, x, *args, **kwargs):
        y = torch.ops.aten.alias.default(x)
        return y if self.rest is None else (y,) + tuple(self.rest)


def load_attr(spec, what, kind):
    """The object NAME of file path/to/file.py (spec "path/to/file.py:NAME"); `what` names it
    in the usage, `kind` in the error."""
    if ":" not in spec:
        raise CaptureError(f"{spec}: expected path/to/file.py:{what}")
    path, name = spec.rsplit(":", 1)
    if not os.path.isfile(path):
        raise CaptureError(f"{path}: model file not found")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # its sibling modules import
    module_spec = importlib.util.spec_from_file_location("scalescope_user_model", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # the user's file: report its error in one line
        raise CaptureError(f"{path}: cannot import: {type(e).__name__}: {one_line(e)}")
    if not hasattr(module, name):
        raise CaptureError(f"{path}: no {kind} {name}")
    LOADED.append(module)
    return getattr(module, name)


LOADED = []  # the user's modules, for a tensor-parallel plan they declare
PLAN_NAMES = ("tp_plan", "TP_PLAN", "tensor_parallel_plan", "parallelize_plan")


def file_tp_plan():
    """A plan the model file declares: a module-level dict (tp_plan, TP_PLAN, ...) of module
    patterns to parallelize_module styles, as instances (ColwiseParallel()) or names."""
    for module in LOADED:
        for name in PLAN_NAMES:
            plan = getattr(module, name, None)
            if isinstance(plan, dict) and plan:
                return {str(k): v if isinstance(v, str) else type(v).__name__
                        for k, v in plan.items()}
    return None


def load_class(spec):
    return load_attr(spec, "ClassName", "class")


def one_line(e):
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def load_args(path):
    if not path:
        return {}
    import yaml
    try:
        with open(path) as f:
            args = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CaptureError(f"{path}: {e}".replace("\n", " "))
    if not isinstance(args, dict):
        raise CaptureError(f"{path}: expected a mapping of constructor arguments")
    return args


class ModuleTracker:
    """Forward hooks that keep the path of the module whose forward is running."""

    def __init__(self, root):
        self.stack = []
        self.handles = []
        for name, m in root.named_modules():
            self.handles.append(m.register_forward_pre_hook(self._enter(name)))
            self.handles.append(m.register_forward_hook(self._leave))

    def _enter(self, name):
        def hook(mod, inp):
            self.stack.append(name)
        return hook

    def _leave(self, mod, inp, out):
        self.stack.pop()  # hooks return None: the module's output stays

    def current(self):
        return self.stack[-1] if self.stack else ""

    def remove(self):
        for h in self.handles:
            h.remove()


def trace(fn, args, tracker, mode):
    """make_fx of fn(*args) under the fake mode, each node tagged with the running module."""
    from torch.fx.experimental import proxy_tensor
    tracer_cls = proxy_tensor.PythonKeyTracer
    original = tracer_cls.create_node
    own = "create_node" in tracer_cls.__dict__  # 1.13 and 2.6 inherit it; later 2.x define it

    def create_node(self, *a, **k):
        node = original(self, *a, **k)
        node.meta["module_path"] = tracker.current()
        return node

    tracer_cls.create_node = create_node
    try:
        with mode:
            return make_fx(fn)(*args)
    finally:
        if own:
            tracer_cls.create_node = original
        else:
            del tracer_cls.create_node


def is_causal(n):
    """A fused attention op's is_causal argument (PyTorch 2.x SDPA ops), by its schema; None for
    other ops."""
    if n.op != "call_function" or "attention" not in str(n.target):
        return None
    if "is_causal" in n.kwargs:
        return bool(n.kwargs["is_causal"])
    schema = getattr(n.target, "_schema", None)
    if schema is None:
        return None
    for i, arg in enumerate(schema.arguments):
        if arg.name == "is_causal":
            return bool(n.args[i]) if i < len(n.args) else bool(arg.default_value)
    return None


# Ops through which a causal mask stays one: views, casts, selections by position (training runs
# positions 0..s-1, so gpt-fast's causal_mask[None, None, input_pos] is the whole triangle), and
# what turns a boolean mask into an additive one (where, masked_fill, logical ops).
MASK_PASS = VIEW_OPS | {"index", "index_select", "where", "masked_fill", "logical_not",
                        "bitwise_not", "clone", "contiguous", "expand_as", "to", "lift_fresh",
                        "lift_fresh_copy", "eq", "ne", "lt", "le", "gt", "ge", "mul", "add",
                        "sub", "neg", "full_like", "zeros_like"}


def describe(graph, param_names, grad_offset, buffer_names=(), buffer_at=None, buffer_masks=(),
             masks=None, input_masks=None):
    """The graph's nodes as plain dicts (inputs by index), module paths completed from the
    parameters that backward ops read. The graph's first placeholders are `param_names`; the
    `buffer_names` placeholders start at placeholder `buffer_at` (they are inputs, never
    differentiated). `input_masks`: placeholder index → "tril" / "triu" for other inputs made by
    those ops (a mask the model hands its blocks); `masks` tells the graph's constants (a mask
    kept as a plain attribute, not a buffer). A fused attention op reading such a mask, through
    MASK_PASS ops, is marked with it."""
    nodes = list(graph.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    out = []
    placeholder = 0
    for n in nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        shapes, dtypes = [], []
        for v in vals:
            if isinstance(v, torch.Tensor):
                shapes.append([int(d) for d in v.shape])
                dtypes.append(str(v.dtype).replace("torch.", ""))
        d = {"name": n.name, "kind": n.op,
             "op": str(n.target).replace("aten.", "") if n.op == "call_function" else "",
             "inputs": [index[a] for a in n.all_input_nodes],
             "shapes": shapes, "dtypes": dtypes,
             "module": n.meta.get("module_path", "")}
        causal = is_causal(n)
        if causal is not None:
            d["causal"] = causal
        if n.op == "placeholder":
            d["param"] = param_names[placeholder] if placeholder < len(param_names) else ""
            if buffer_at is not None and 0 <= placeholder - buffer_at < len(buffer_names):
                d["buffer"] = buffer_names[placeholder - buffer_at]
                d["module"] = d["buffer"].rpartition(".")[0]
                if placeholder - buffer_at < len(buffer_masks) and \
                        buffer_masks[placeholder - buffer_at]:
                    d["mask"] = buffer_masks[placeholder - buffer_at]  # made by tril / triu
            if input_masks and input_masks.get(placeholder):
                d["mask"] = input_masks[placeholder]
            placeholder += 1
            if d["param"]:
                d["module"] = d["param"].rsplit(".", 1)[0]
        elif n.op == "get_attr" and masks is not None:
            kind = masks.kind(getattr(graph, n.target, None))
            if kind:
                d["mask"] = kind  # a constant made by tril / triu (a plain attribute)
        out.append(d)
    # Masks through the ops that keep them masks, onto the fused attention ops that read them.
    mask_of = {}
    for i, d in enumerate(out):
        if d.get("mask"):
            mask_of[i] = d["mask"]
        elif d["kind"] == "call_function":
            src = next((mask_of[j] for j in d["inputs"] if j in mask_of), None)
            if src is None:
                continue
            if "attention" in d["op"]:
                d["mask"] = src
            elif d["op"].split(".")[0] in MASK_PASS:
                mask_of[i] = src
    # Backward ops run outside forward hooks: take the module of a parameter they read, through
    # view-like ops (the weight of a dgrad / wgrad GEMM).
    def param_module(i, depth=0):
        d = out[i]
        if d["kind"] == "placeholder" and d.get("param"):
            return d["module"]
        if depth > 4 or d["kind"] != "call_function" or d["op"].split(".")[0] not in VIEW_OPS:
            return ""
        for j in d["inputs"]:
            m = param_module(j, depth + 1)
            if m:
                return m
        return ""
    for d in out:
        if d["kind"] == "call_function" and not d["module"]:
            for j in d["inputs"]:
                m = param_module(j)
                if m:
                    d["module"] = m
                    break
    # A weight-gradient op feeds the returned gradient of its parameter (through view-like ops):
    # the graph's outputs are (result, (grads…)), the parameters' grads from `grad_offset` on.
    flat = []
    def flatten(a):
        if isinstance(a, (list, tuple)):
            for x in a:
                flatten(x)
        elif isinstance(a, torch.fx.Node):
            flat.append(index[a])
    output = next(n for n in nodes if n.op == "output")
    flatten(output.args)
    for pos, i in enumerate(flat[grad_offset:grad_offset + len(param_names)]):
        module = param_names[pos].rsplit(".", 1)[0]
        j = i
        for _ in range(6):
            d = out[j]
            if d["kind"] != "call_function":
                break
            if not d["module"] or d["module"] == "":
                d["module"] = module
            if d["op"].split(".")[0] not in VIEW_OPS or not d["inputs"]:
                break
            j = d["inputs"][0]
    return out


GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "_grouped_mm"}  # _grouped_mm: (a, b, offsets)


def gemm_flops(op, a, b):
    """FLOPs of a matrix-multiply op with operands of shapes a [..., m, k] and b [..., k, n]."""
    if op not in GEMM_OPS or not a or not b:
        return 0
    numel = 1
    for d in a:
        numel *= d
    return 2 * numel * b[-1]


def node_gemm_flops(nodes):
    """GEMM FLOPs of described nodes (what capture.h5 holds)."""
    total = 0
    for d in nodes:
        op = d["op"].split(".")[0]
        if d["kind"] != "call_function" or op not in GEMM_OPS or len(d["inputs"]) < 2:
            continue
        ia, ib = (d["inputs"][-2], d["inputs"][-1]) if op in ("addmm", "baddbmm") \
            else (d["inputs"][0], d["inputs"][1])
        sa, sb = nodes[ia]["shapes"], nodes[ib]["shapes"]
        total += gemm_flops(op, sa[0] if sa else None, sb[0] if sb else None)
    return total


def eager_gemm_flops(fn, args, mode):
    """GEMM FLOPs of fn(*args) run eagerly over fake tensors: what the traced graph must hold."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func)  # "aten.mm.default"
            op = name.split(".")[1] if name.startswith("aten.") else name
            if op in GEMM_OPS:
                t = [x for x in args if isinstance(x, torch.Tensor)]
                a, b = (t[-2], t[-1]) if op in ("addmm", "baddbmm") else (t[0], t[1])
                Counter.flops += gemm_flops(op, list(a.shape), list(b.shape))
            return out

    with mode, Counter():
        fn(*args)
    return Counter.flops


def find_blocks(model, path, where):
    """(dotted path, the nn.ModuleList of the repeated blocks): the one `path` names, else the
    largest (by parameters) nn.ModuleList of modules of one class anywhere in the module tree."""
    if path:
        try:
            blocks = model.get_submodule(path)
        except AttributeError:
            raise CaptureError(f"{where}: no module '{path}' (--blocks names the nn.ModuleList "
                               "of repeated blocks by its dotted path, e.g. transformer.h)")
        if not isinstance(blocks, (nn.ModuleList, nn.ModuleDict)) or len(blocks) == 0:
            raise CaptureError(f"{where}: '{path}' is not a non-empty nn.ModuleList or "
                               "nn.ModuleDict")
        return path, blocks
    best = None
    for name, m in model.named_modules():
        # nn.ModuleList, or nn.ModuleDict keyed 0, 1, ... (torchtitan's `layers`)
        if name and isinstance(m, (nn.ModuleList, nn.ModuleDict)) and len(m) > 0 and \
                len({type(c) for c in (m.values() if isinstance(m, nn.ModuleDict) else m)}) == 1:
            key = (sum(p.numel() for p in m.parameters()), -name.count("."))
            if best is None or key > best[0]:
                best = (key, name, m)
    if best is None:
        raise CaptureError(f"{where}: no nn.ModuleList of repeated blocks found in the module "
                           "tree (name it with --blocks PATH)")
    return best[1], best[2]


def block_list(blocks, items):
    """A container like `blocks` (nn.ModuleList, or nn.ModuleDict keyed "0", "1", …) of `items`."""
    if isinstance(blocks, nn.ModuleDict):
        return nn.ModuleDict({str(i): m for i, m in enumerate(items)})
    return nn.ModuleList(items)


def set_submodule(model, path, module):
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def named_tensors(module, kind):
    """(unique tensors, {every name → index}) of a module's parameters or buffers, tied ones
    under each of their names (functional_call must replace every alias)."""
    tensors, names, index = [], {}, {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        store = m._parameters if kind == "param" else m._buffers
        for leaf, t in store.items():
            if t is None:
                continue
            if id(t) not in index:
                index[id(t)] = len(tensors)
                tensors.append((f"{prefix}.{leaf}" if prefix else leaf, t))
            names[f"{prefix}.{leaf}" if prefix else leaf] = index[id(t)]
    return tensors, names


def as_mapping(values, names):
    return {name: values[i] for name, i in names.items()}


def loss_and_logits(out, vocab):
    """(loss, logits) of a forward's output: a tensor, a tuple / list, a dict (Hugging Face's
    ModelOutput is one) or a dataclass; either may be None."""
    if isinstance(out, torch.Tensor):
        items = [("", out)]
    elif isinstance(out, dict):
        items = list(out.items())
    elif dataclasses.is_dataclass(out):
        items = [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out)]
    elif isinstance(out, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(out)]
    else:
        items = []
    tensors = [(k, v) for k, v in items if isinstance(v, torch.Tensor) and v.is_floating_point()]
    named = dict(tensors)
    loss = named.get("loss")
    if loss is None:
        loss = next((v for _, v in tensors if v.dim() == 0), None)
    logits = named.get("logits")
    if logits is None:
        logits = next((v for _, v in tensors if v.dim() >= 2 and v.shape[-1] == vocab), None)
    return loss, logits


def first_tensor(out):
    """A block's output hidden states: the tensor, or the first tensor of a tuple / list."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for v in out:
            if isinstance(v, torch.Tensor):
                return v
    raise CaptureError(f"a block returned {type(out).__name__}, not a tensor")


def traced(where, what, fn):
    """Runs fn (a fake run or a trace), turning what the model cannot do into one line."""
    try:
        return fn()
    except CaptureError:
        raise
    except Exception as e:
        text = f"{type(e).__name__}: {one_line(e)}"
        if "DataDependent" in type(e).__name__ or "_local_scalar_dense" in text or \
                "data-dependent" in text.lower() or "data dependent" in text.lower():
            raise CaptureError(f"{where}: {what}: data-dependent control flow (a Python branch "
                               f"or value that reads a tensor's contents; {text})")
        raise CaptureError(f"{where}: {what}: unsupported ({text})")


def check_trace(where, part, nodes, names, expected_flops):
    """A truncated trace is an error: every parameter must be read by the graph, and its GEMM
    FLOPs must be those of the eager run."""
    used = set()
    for d in nodes:
        used.update(d["inputs"])
    missing = [d["param"] for i, d in enumerate(nodes)
               if d["kind"] == "placeholder" and d.get("param") and i not in used]
    present = {d["param"] for d in nodes if d["kind"] == "placeholder" and d.get("param")}
    missing += [n for n in names if n not in present]
    if missing:
        raise CaptureError(f"{where}: the {part} trace is truncated: parameter {missing[0]} "
                           f"is not in it ({len(missing)} missing)")
    got = node_gemm_flops(nodes)
    if got != expected_flops:
        raise CaptureError(f"{where}: the {part} trace is truncated: its GEMMs do {got:.4g} "
                           f"FLOPs, the model's run {expected_flops:.4g}")


def test_truncation(nodes):
    """Test hook (SCALESCOPE_CAPTURE_TEST_TRUNCATE=1): keep the first half of the nodes, as a
    trace that stopped early would."""
    if os.environ.get("SCALESCOPE_CAPTURE_TEST_TRUNCATE") == "1":
        kept = nodes[:len(nodes) // 2]
        return [dict(d, inputs=[i for i in d["inputs"] if i < len(kept)]) for d in kept]
    return nodes


class MaskProvenance:
    """Tells which tensors were made by tril / triu (a causal mask registered as a buffer, as
    nanoGPT and minGPT do) and what views or casts them: a fake tensor has no values to look at,
    so the ops that made it are watched while the model is built."""
    PASS = {"view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "unsqueeze", "squeeze",
            "slice", "alias", "t", "transpose", "permute", "detach", "_to_copy", "clone",
            "contiguous", "lift_fresh", "lift_fresh_copy", "to", "index"}

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        kinds, keep, passing = {}, [], self.PASS

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                name = str(func)
                op = name.split(".")[1] if name.startswith("aten.") else ""
                mark = None
                if op.rstrip("_") in ("tril", "triu"):
                    mark = op.rstrip("_")
                elif op in passing:
                    src = next((a for a in args if isinstance(a, torch.Tensor)), None)
                    mark = kinds.get(id(src)) if src is not None else None
                if mark and isinstance(out, torch.Tensor):
                    kinds[id(out)] = mark
                    keep.append(out)  # ids stay valid while the tensor lives
                return out

        self.mode, self.kinds, self.keep = Mode(), kinds, keep

    def kind(self, tensor):
        return self.kinds.get(id(tensor), "")

    def mark(self, tensor, kind):
        """A mask known causal otherwise (a Hugging Face attention's own is_causal)."""
        self.kinds[id(tensor)] = kind
        self.keep.append(tensor)  # its id stays valid


def block_signatures(model, blocks, mode, call):
    """Per block of the list, the ATen ops its forward runs (op and output shapes), from one fake
    forward of the whole model: blocks that differ (gpt-oss's sliding-window layers between
    full-attention ones) show here."""
    from torch.utils._python_dispatch import TorchDispatchMode
    sigs = [[] for _ in blocks]
    at = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if at:
                outs = out if isinstance(out, (tuple, list)) else [out]
                sigs[at[-1]].append((str(func).replace("aten.", ""), tuple(
                    tuple(o.shape) for o in outs if isinstance(o, torch.Tensor))))
            return out

    def leave(mod, a, o):
        at.pop()  # returns None: the block's output stays

    handles = []
    for i, b in enumerate(blocks):
        handles.append(b.register_forward_pre_hook(lambda mod, a, i=i: at.append(i)))
        handles.append(b.register_forward_hook(leave))
    try:
        with mode, Recorder():
            call()
    finally:
        for h in handles:
            h.remove()
    return sigs


def first_difference(sigs, blocks_path):
    """None when every block runs block 0's ops, else a one-line description of the first
    block that does not."""
    for i, sig in enumerate(sigs[1:], 1):
        if sig == sigs[0]:
            continue
        k = next((j for j, (a, b) in enumerate(zip(sigs[0], sig)) if a != b),
                 min(len(sig), len(sigs[0])))
        show = lambda s: f"{s[k][0]} -> {list(s[k][1])}" if k < len(s) else "nothing more"
        return (f"block {blocks_path}.{i} runs other ops than {blocks_path}.0 ({len(sig)} "
                f"against {len(sigs[0])} ops; op {k}: {show(sig)} against {show(sigs[0])})")
    return None


def build_model(model_spec, factory, args_path, mode, torch_dtype, masks):
    """(model, example inputs or None, where (for messages), class name, constructor kwargs)."""
    if factory:
        fn = load_attr(factory, "FUNCTION", "function")
        with mode, masks.mode:
            try:
                made = fn()
            except Exception as e:
                raise CaptureError(f"{factory}: the factory failed: {type(e).__name__}: "
                                   f"{one_line(e)}")
        inputs = None
        if isinstance(made, (tuple, list)) and len(made) == 2 and isinstance(made[0], nn.Module):
            made, inputs = made
        if not isinstance(made, nn.Module):
            raise CaptureError(f"{factory}: returned {type(made).__name__}, not an nn.Module "
                               "(or a module and its example inputs)")
        kwargs = {}
        model = made
        where = f"{factory} ({type(model).__name__})"
    else:
        cls = load_class(model_spec)
        kwargs = load_args(args_path)
        inputs = None
        with mode, masks.mode:
            try:
                model = cls(**kwargs)
            except TypeError as e:
                raise CaptureError(f"{model_spec}: constructor arguments: {one_line(e)}")
            except Exception as e:
                raise CaptureError(f"{model_spec}: the constructor failed: {type(e).__name__}: "
                                   f"{one_line(e)}")
        where = model_spec
    with mode, masks.mode:
        cast_floating(model, torch_dtype)
    return model, inputs, where, type(model).__name__, kwargs


def cast_floating(model, dtype):
    """model.to(dtype) for floating parameters and buffers, tied ones staying tied. Done by hand:
    PyTorch 2.x's Module.to swaps a tensor subclass (a fake tensor) in place, which fails on the
    weak references the fake mode keeps ("Couldn't swap Embedding.weight")."""
    done = {}
    for m in model.modules():
        for store, is_param in ((m._parameters, True), (m._buffers, False)):
            for name, t in list(store.items()):
                if t is None or not t.is_floating_point() or t.dtype == dtype:
                    continue
                if id(t) not in done:
                    c = t.detach().to(dtype)
                    done[id(t)] = nn.Parameter(c, requires_grad=t.requires_grad) if is_param \
                        else c
                store[name] = done[id(t)]


def capture(model_spec, args_path, batch, seq, dtype, blocks_path, factory=None,
            same_blocks=False):
    """batch / seq: None where the command line left them out (the example inputs, else 1 and
    4096)."""
    batch_asked, seq_asked = batch, seq
    batch, seq = batch or 1, seq or 4096
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype]
    mode = FakeTensorMode()
    t0 = time.time()
    masks = MaskProvenance()
    model, inputs, where, cls_name, kwargs = build_model(model_spec, factory, args_path, mode,
                                                         torch_dtype, masks)
    blocks_path, blocks = find_blocks(model, blocks_path, where)
    num_blocks = len(blocks)
    if isinstance(blocks, nn.ModuleDict):
        blocks = nn.ModuleList(list(blocks.values()))  # in order; rebuilt as a dict below
        container = nn.ModuleDict
    else:
        container = nn.ModuleList
    block = blocks[0]
    vocab = None
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            vocab = m.num_embeddings
            break
    if vocab is None:
        raise CaptureError(f"{where}: no nn.Embedding found (the model takes token ids)")
    # The forward's arguments: the factory's example inputs, else token ids (and labels where
    # the signature asks for them: nanoGPT computes full logits only when given targets).
    with mode:
        tokens = torch.zeros(batch, seq, dtype=torch.long)
        labels = torch.zeros(batch, seq, dtype=torch.long)
    if inputs is not None:
        call_args = tuple(inputs) if isinstance(inputs, (tuple, list)) else ()
        call_kwargs = dict(inputs) if isinstance(inputs, dict) else {}
        if not isinstance(inputs, (tuple, list, dict)):
            call_args = (inputs,)
        given = [t for t in list(call_args) + list(call_kwargs.values())
                 if isinstance(t, torch.Tensor) and not t.is_floating_point()]
        # Token ids: [batch, seq], or [seq] for a forward over one sequence (gpt-oss's).
        ids = next((t for t in given if t.dim() == 2), None)
        if ids is None:
            ids = next((t for t in given if t.dim() == 1), None)
        if ids is None:
            raise CaptureError(f"{where}: the example inputs hold no [batch, seq] token ids")
        shape = (1, int(ids.shape[0])) if ids.dim() == 1 else tuple(int(d) for d in ids.shape)
        for flag, asked, got in (("--batch", batch_asked, shape[0]), ("--seq", seq_asked, shape[1])):
            if asked is not None and asked != got:
                raise CaptureError(f"{where}: {flag} {asked} differs from the factory's example "
                                   f"inputs ({flag[2:]} {got}); leave {flag} out or make the "
                                   "inputs match")
        batch, seq = shape
        with mode:
            labels = torch.zeros(ids.shape, dtype=torch.long)
    else:
        params = inspect.signature(model.forward).parameters
        label_kw = next((n for n in ("targets", "labels") if n in params), None)
        call_args = (tokens,)
        call_kwargs = {label_kw: labels} if label_kw else {}
    # One block is captured for all: they must run the same ops, or the user says to take
    # block 0 for all of them (said in the capture and in every summary).
    blocks_differ = ""
    if num_blocks > 1:
        sigs = traced(where, "forward", lambda: block_signatures(
            model, blocks, mode, lambda: model(*call_args, **call_kwargs)))
        diff = first_difference(sigs, blocks_path)
        if diff and not same_blocks:
            raise CaptureError(f"{where}: {diff}; one captured block stands for all of them, so "
                               "this capture would cost every block as block 0 (pass "
                               "--same-blocks to accept that, said in the output)")
        blocks_differ = diff or ""
    set_submodule(model, blocks_path, block_list(container(), [block]))
    # The block's inputs inside the model: a fake forward with a pre-hook.
    seen = {}

    def grab(mod, a, k=None):
        # Hugging Face's decoder layers take the rest by keyword (position_embeddings, masks):
        # the hidden states are the first positional argument, or `hidden_states`.
        k = dict(k or {})
        if not a and "hidden_states" in k:
            a = (k.pop("hidden_states"),)
        seen.setdefault("args", a)
        seen.setdefault("kwargs", k)

    def grab_out(mod, a, out):
        seen.setdefault("out", out)
    try:  # keyword arguments reach a pre-hook from PyTorch 2.0 on
        pre = block.register_forward_pre_hook(grab, with_kwargs=True)
    except TypeError:  # PyTorch 1.13
        pre = block.register_forward_pre_hook(grab)
    handles = [pre, block.register_forward_hook(grab_out)]
    before = {k: id(v) for k, v in vars(model).items()}
    with mode, masks.mode:  # masks the forward makes from a tril / triu are followed too
        out = traced(where, "forward", lambda: model(*call_args, **call_kwargs))
    for h in handles:
        h.remove()
    # A loss the forward keeps in an attribute rather than returns (llama2.c's self.last_loss):
    # a 0-d floating tensor newly assigned to the model during the forward.
    loss_attr = None
    if loss_and_logits(out, vocab)[0] is None:
        kept = [k for k, v in vars(model).items() if isinstance(v, torch.Tensor) and
                v.dim() == 0 and v.is_floating_point() and before.get(k) != id(v)]
        if len(kept) == 1:
            loss_attr = kept[0]
    block_out = seen.get("out")
    if isinstance(block_out, (tuple, list)) and block_out and \
            isinstance(block_out[0], torch.Tensor):
        marker_rest = tuple(block_out[1:])
    elif isinstance(block_out, torch.Tensor):
        marker_rest = None
    else:
        raise CaptureError(f"{where}: a block of {blocks_path} returned "
                           f"{type(block_out).__name__}, not the hidden states (a tensor, or a "
                           "tuple with them first)")
    loss, logits = loss_and_logits(out, vocab)
    if loss is None and loss_attr:
        loss = getattr(model, loss_attr)
    if loss is None and logits is None:
        raise CaptureError(f"{where}: the forward returned {type(out).__name__} with no loss and "
                           f"no logits over the {vocab}-token vocabulary")
    loss_from = (f"model.{loss_attr}" if loss_attr else "model") if loss is not None \
        else "cross_entropy(logits)"
    if "args" not in seen or not seen["args"] or not isinstance(seen["args"][0], torch.Tensor):
        raise CaptureError(f"{where}: the blocks in {blocks_path} did not run with hidden states "
                           "as their first argument")
    block_args = seen["args"]
    tracker = ModuleTracker(model)
    prefix = f"{blocks_path}.0."

    # Block: forward and backward w.r.t. its input hidden states and its parameters; its
    # buffers (a causal mask) are inputs too, so that what reads them is traced.
    block_params, block_pnames = named_tensors(block, "param")
    block_buffers, block_bnames = named_tensors(block, "buffer")
    pvals0 = [t for _, t in block_params]
    bvals0 = [t for _, t in block_buffers]
    rest = tuple(block_args[1:])
    block_kwargs = seen.get("kwargs", {})
    # Hugging Face hands its layers a materialized mask (a boolean one, made by comparisons, not
    # tril); its attention modules declare is_causal, so that mask is a causal one.
    mask = block_kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and \
            any(getattr(m, "is_causal", False) is True for m in block.modules()):
        masks.mark(mask, "causal")

    def block_fn(pvals, hidden, bvals, *rest):
        state = as_mapping(pvals, block_pnames)
        state.update(as_mapping(bvals, block_bnames))
        out = first_tensor(functional_call(block, state, (hidden,) + tuple(rest),
                                           block_kwargs))
        grads = torch.autograd.grad(out, [hidden] + list(pvals), torch.ones_like(out))
        return out, grads
    with mode:
        hidden = block_args[0].detach().requires_grad_(True)
    args = (pvals0, hidden, bvals0) + rest
    expected = traced(where, "block", lambda: eager_gemm_flops(block_fn, args, mode))
    g_block = traced(where, "block", lambda: trace(block_fn, args, tracker, mode))
    pnames = [prefix + n for n, _ in block_params]
    leaves = torch.utils._pytree.tree_flatten(list(rest))[0]
    first_rest = len(pvals0) + 1 + len(bvals0)
    rest_masks = {first_rest + k: masks.kind(x) for k, x in enumerate(leaves)
                  if isinstance(x, torch.Tensor) and masks.kind(x)}
    block_nodes = describe(g_block, pnames, 2, [prefix + n for n, _ in block_buffers],
                           len(pvals0) + 1, [masks.kind(t) for _, t in block_buffers], masks,
                           rest_masks)
    block_nodes = test_truncation(block_nodes)
    check_trace(where, "block", block_nodes, pnames, expected)
    fusion = {"block": inductor_kernels(g_block, block_nodes, mode)}

    # Outer: the model with a marker in place of its blocks, through the loss.
    tracker.remove()
    set_submodule(model, blocks_path, block_list(container(), [BlocksMarker(marker_rest)]))
    tracker = ModuleTracker(model)
    outer_params, outer_pnames = named_tensors(model, "param")
    outer_buffers, outer_bnames = named_tensors(model, "buffer")
    opvals = [t for _, t in outer_params]
    obvals = [t for _, t in outer_buffers]

    def outer_fn(pvals, bvals, call_args, call_kwargs, labels):
        state = as_mapping(pvals, outer_pnames)
        state.update(as_mapping(bvals, outer_bnames))
        out = functional_call(model, state, tuple(call_args), dict(call_kwargs))
        loss, logits = loss_and_logits(out, vocab)
        if loss is None and loss_attr:
            loss = getattr(model, loss_attr)
        if loss is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                   labels.reshape(-1))
        return loss, torch.autograd.grad(loss, list(pvals))
    oargs = (opvals, obvals, list(call_args), call_kwargs, labels)
    expected = traced(where, "outer graph", lambda: eager_gemm_flops(outer_fn, oargs, mode))
    g_outer = traced(where, "outer graph", lambda: trace(outer_fn, oargs, tracker, mode))
    onames = [n for n, _ in outer_params]
    outer_nodes = describe(g_outer, onames, 1, [n for n, _ in outer_buffers], len(opvals),
                           [masks.kind(t) for _, t in outer_buffers], masks)
    check_trace(where, "outer", outer_nodes, onames, expected)
    fusion["outer"] = inductor_kernels(g_outer, outer_nodes, mode)
    tracker.remove()
    set_submodule(model, blocks_path, block_list(container(), [block] * num_blocks))
    meta = {"format_version": FORMAT_VERSION, "model": factory or model_spec, "class": cls_name,
            "args": json.dumps(kwargs), "torch_version": torch.__version__, "batch": batch,
            "seq": seq, "dtype": dtype, "blocks_attr": blocks_path, "num_blocks": num_blocks,
            "vocab_size": vocab, "loss": loss_from, "capture_seconds": time.time() - t0,
            "fusion_json": json.dumps(fusion)}
    if blocks_differ:
        meta["blocks_differ"] = blocks_differ
    plan = file_tp_plan()
    if plan:
        meta["tp_plan"] = json.dumps(plan)
    return meta, block_nodes, outer_nodes


def inductor_kernels(gm, nodes, mode):
    """Inductor's own fusion decisions for the joint graph gm (scripts/capture/
    inductor_fusion.py), written into its described nodes as "kernel" (a kernel number, or -1
    for an op Inductor emits no kernel for); what happened, for capture.h5's meta: {"source":
    "inductor", "kernels": [forward, backward]} or {"source": "re-derived", "why": ...} where
    Inductor could not be read (PyTorch 1.13 has no Inductor; the lowering re-derives)."""
    if not hasattr(torch, "compile"):
        return {"source": "re-derived", "why": f"PyTorch {torch.__version__} has no Inductor"}
    try:
        import inductor_fusion
        kernel, counts = inductor_fusion.kernels(gm, mode)
    except Exception as e:  # noqa: BLE001  (said in the capture and the run, never silent)
        why = f"{type(e).__name__}: {one_line(e)}"
        return {"source": "re-derived", "why": "Inductor: " + (why if len(why) <= 160 else
                                                                why[:157] + "...")}
    for d, n in zip(nodes, gm.graph.nodes):
        if n.name in kernel:
            d["kernel"] = kernel[n.name]
    return {"source": "inductor", "kernels": counts}


def write(path, meta, block_nodes, outer_nodes):
    tmp = path + ".tmp"
    try:
        with h5py.File(tmp, "w") as f:
            m = f.create_group("meta")
            for k, v in meta.items():
                m.attrs[k] = str(v) if isinstance(v, str) else v
            for name, nodes in (("block", block_nodes), ("outer", outer_nodes)):
                g = f.create_group(name)
                g.attrs["num_nodes"] = len(nodes)
                g.create_dataset("nodes_json",
                                 data=np.frombuffer(json.dumps(nodes).encode(), dtype=np.uint8))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", help="path/to/file.py:ClassName")
    p.add_argument("--factory", help="path/to/file.py:FUNCTION returning the module (or the "
                   "module and example inputs)")
    p.add_argument("--args", help="YAML mapping of constructor arguments")
    p.add_argument("--batch", type=int, help="micro-batch (default: the factory's example "
                   "inputs, else 1); a factory's inputs must agree with it")
    p.add_argument("--seq", type=int, help="sequence length (default: the factory's example "
                   "inputs, else 4096); a factory's inputs must agree with it")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--blocks", default="", help="dotted path of the nn.ModuleList of repeated "
                   "blocks (default: found in the module tree)")
    p.add_argument("--same-blocks", action="store_true", help="the blocks run different ops "
                   "(sliding-window and full-attention layers): cost every one as the first, "
                   "said in the capture and its summaries")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    if bool(a.model) == bool(a.factory):
        p.error("give the model as path/to/file.py:ClassName or --factory FILE.py:FUNCTION")
    if a.factory and a.args:
        p.error("--args applies to a model class, not to --factory")
    try:
        meta, block, outer = capture(a.model, a.args, a.batch, a.seq, a.dtype, a.blocks,
                                     a.factory, a.same_blocks)
        write(a.output, meta, block, outer)
    except CaptureError as e:
        print(f"capture: error: {e}", file=sys.stderr)
        return 2
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"captured {meta['class']}: block {len(block)} nodes × {meta['num_blocks']} "
          f"({meta['blocks_attr']}), outer {len(outer)} nodes in {meta['capture_seconds']:.2f} s, "
          f"{rss:.0f} MiB max RSS → {a.output}")
    if meta.get("blocks_differ"):
        print(f"warning: {meta['blocks_differ']}; every block is costed as the first "
              "(--same-blocks)")
    if meta["loss"] == "cross_entropy(logits)":
        print("note: the forward returns no loss; the backward differentiates a cross-entropy on "
              "its logits")
    elif meta["loss"] != "model":
        print(f"note: the loss is the forward's {meta['loss']} (kept in an attribute, not "
              "returned)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
