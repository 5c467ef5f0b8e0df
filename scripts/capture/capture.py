#!/usr/bin/env python3
"""Flint-style capture (issue 11 part 1): the ATen-level joint forward+backward graph of a user's
own PyTorch model, traced with make_fx over fake tensors (no weights are ever allocated), written
to capture.h5 for scalescope.

    capture.py path/to/model.py:ClassName [--args args.yaml] [--batch B] [--seq S]
               [--dtype bf16|fp32] [--blocks layers] -o capture.h5

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
import importlib.util
import json
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
    what runs before the blocks (embedding) and after them (final norm, head, loss)."""

    def forward(self, x, *args, **kwargs):
        return torch.ops.aten.alias.default(x)


def load_class(spec):
    if ":" not in spec:
        raise CaptureError(f"{spec}: expected path/to/file.py:ClassName")
    path, cls = spec.rsplit(":", 1)
    if not os.path.isfile(path):
        raise CaptureError(f"{path}: model file not found")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # its sibling modules import
    module_spec = importlib.util.spec_from_file_location("scalescope_user_model", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # the user's file: report its error in one line
        raise CaptureError(f"{path}: cannot import: {type(e).__name__}: {e}")
    if not hasattr(module, cls):
        raise CaptureError(f"{path}: no class {cls}")
    return getattr(module, cls)


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


def describe(graph, param_names, grad_offset):
    """The graph's nodes as plain dicts (inputs by index), module paths completed from the
    parameters that backward ops read."""
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
            placeholder += 1
            if d["param"]:
                d["module"] = d["param"].rsplit(".", 1)[0]
        out.append(d)
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


def capture(model_spec, args_path, batch, seq, dtype, blocks_attr):
    cls = load_class(model_spec)
    kwargs = load_args(args_path)
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype]
    mode = FakeTensorMode()
    t0 = time.time()
    with mode:
        try:
            model = cls(**kwargs)
        except TypeError as e:
            raise CaptureError(f"{model_spec}: constructor arguments: {e}")
        model = model.to(torch_dtype)
    blocks = getattr(model, blocks_attr, None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise CaptureError(f"{model_spec}: no non-empty nn.ModuleList attribute '{blocks_attr}' "
                           "(name the repeated blocks with --blocks)")
    num_blocks = len(blocks)
    block = blocks[0]
    setattr(model, blocks_attr, nn.ModuleList([block]))
    vocab = None
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            vocab = m.num_embeddings
            break
    if vocab is None:
        raise CaptureError(f"{model_spec}: no nn.Embedding found (the model takes token ids)")
    with mode:
        tokens = torch.zeros(batch, seq, dtype=torch.long)
        labels = torch.zeros(batch, seq, dtype=torch.long)
    # The block's inputs inside the model: a fake forward with a pre-hook.
    seen = {}
    def grab(mod, a, k=None):
        seen.setdefault("args", a)
    handle = block.register_forward_pre_hook(grab)
    with mode:
        model(tokens)
    handle.remove()
    block_args = seen["args"]
    tracker = ModuleTracker(model)

    # Block: forward and backward w.r.t. its input hidden states and its parameters.
    block_params = dict(block.named_parameters())
    block_names = list(block_params)
    def block_fn(pvals, hidden, *rest):
        out = functional_call(block, dict(zip(block_names, pvals)), (hidden,) + tuple(rest))
        grads = torch.autograd.grad(out, [hidden] + list(pvals), torch.ones_like(out))
        return out, grads
    with mode:
        hidden = block_args[0].detach().requires_grad_(True)
    prefix = f"{blocks_attr}.0."
    g_block = trace(block_fn, (list(block_params.values()), hidden) + tuple(block_args[1:]),
                    tracker, mode)
    block_nodes = describe(g_block, [prefix + n for n in block_names], 2)

    # Outer: the model with a marker in place of its blocks, through the loss.
    tracker.remove()
    setattr(model, blocks_attr, nn.ModuleList([BlocksMarker()]))
    tracker = ModuleTracker(model)
    outer_params = dict(model.named_parameters())
    outer_names = list(outer_params)
    def outer_fn(pvals, tokens, labels):
        logits = functional_call(model, dict(zip(outer_names, pvals)), (tokens,))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
        return loss, torch.autograd.grad(loss, list(pvals))
    g_outer = trace(outer_fn, (list(outer_params.values()), tokens, labels), tracker, mode)
    outer_nodes = describe(g_outer, outer_names, 1)
    tracker.remove()
    setattr(model, blocks_attr, nn.ModuleList([block] * num_blocks))
    meta = {"format_version": FORMAT_VERSION, "model": model_spec, "class": cls.__name__,
            "args": json.dumps(kwargs), "torch_version": torch.__version__, "batch": batch,
            "seq": seq, "dtype": dtype, "blocks_attr": blocks_attr, "num_blocks": num_blocks,
            "vocab_size": vocab, "capture_seconds": time.time() - t0}
    return meta, block_nodes, outer_nodes


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
    p.add_argument("model", help="path/to/file.py:ClassName")
    p.add_argument("--args", help="YAML mapping of constructor arguments")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--blocks", default="layers", help="the nn.ModuleList of repeated blocks")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    try:
        meta, block, outer = capture(a.model, a.args, a.batch, a.seq, a.dtype, a.blocks)
        write(a.output, meta, block, outer)
    except CaptureError as e:
        print(f"capture: error: {e}", file=sys.stderr)
        return 2
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"captured {meta['class']}: block {len(block)} nodes × {meta['num_blocks']}, outer "
          f"{len(outer)} nodes in {meta['capture_seconds']:.2f} s, {rss:.0f} MiB max RSS → "
          f"{a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
