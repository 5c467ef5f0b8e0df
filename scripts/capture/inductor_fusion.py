"""Inductor's own fusion decisions for a captured joint graph (issue 39): which of the graph's
ops torch.compile's Inductor puts into one generated kernel, read from Inductor's scheduler
rather than re-derived. No GPU is needed: the graph is split at the forward (the ancestors of
its first output; the backward reads the forward tensors it needs as inputs, as AOTAutograd's
partitioned graphs do), each part is decomposed with Inductor's decomposition table over fake
CUDA tensors and handed to Inductor's compile_fx_inner for an H100 (sm_90: the device
properties Inductor asks for are answered with an H100's, Triton's availability check is
answered yes); the scheduler's nodes after its fusion passes (config._post_fusion_custom_pass)
are read and compilation stops there: no kernel is generated or run. Each scheduler node's
origins, followed back through the decomposition (fx.traceback's from_node provenance), name
the captured ops it fuses."""
import collections
import operator

import torch
import torch.fx as fx
import torch.fx.traceback as fxt
from torch.fx.experimental.proxy_tensor import make_fx

# An H100 SXM's properties (NVIDIA H100 datasheet / cudaGetDeviceProperties on sm_90): what
# Inductor's heuristics read (SM count, capability, shared memory, warp size).
_Props = collections.namedtuple(
    "_Props", "name major minor multi_processor_count total_memory "
    "max_threads_per_multi_processor warp_size regs_per_multiprocessor L2_cache_size "
    "gcnArchName shared_memory_per_block_optin max_threads_per_block "
    "shared_memory_per_multiprocessor clock_rate")
H100 = _Props("NVIDIA H100 80GB HBM3", 9, 0, 132, 80 * 2**30, 2048, 32, 65536, 50 * 2**20, "",
              232448, 1024, 233472, 1980000)


class _Stop(Exception):
    pass


class _OnCuda(fx.Interpreter):
    """Re-runs a captured graph with every device= argument on CUDA (the capture ran on CPU
    fake tensors; Inductor's Triton backend is chosen by the tensors' device)."""

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0:
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                       device="cuda")
        return value

    def call_function(self, target, args, kwargs):
        if isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type == "cpu":
            kwargs = dict(kwargs, device=torch.device("cuda"))
        return super().call_function(target, args, kwargs)


def _split(gm):
    """(forward graph, backward graph) of the joint graph gm: node names kept."""
    nodes = list(gm.graph.nodes)
    out = nodes[-1]
    first = out.args[0][0]
    fwd, todo = set(), [first]
    while todo:
        x = todo.pop()
        if isinstance(x, fx.Node) and x not in fwd:
            fwd.add(x)
            todo.extend(x.all_input_nodes)
    # An element of a forward op's tuple result goes with it (the backward reads tensors).
    for n in nodes:
        if n.target is operator.getitem and n.args[0] in fwd:
            fwd.add(n)
    parts = []
    for want in (True, False):
        g, env = fx.Graph(), {}
        body = [n for n in nodes if n.op not in ("output",) and (n in fwd) == want]
        if want:
            inputs = [n for n in body if n.op == "placeholder"]
        else:
            used = {a for n in body for a in n.all_input_nodes}
            inputs = [n for n in nodes if n in used and (n in fwd or n.op == "placeholder")]
            body = [n for n in body if n.op != "placeholder"]
        for n in inputs:
            p = g.placeholder(n.name)
            p.meta = dict(n.meta)
            env[n] = p
        for n in body:
            if n.op == "placeholder":
                continue
            env[n] = g.node_copy(n, lambda a: env[a])
        if want:
            readers = {a for n in nodes if n not in fwd for a in n.all_input_nodes}
            outs = [env[n] for n in body if n in readers and n.op != "placeholder"]
            outs.append(env[first]) if env[first] not in outs else None
        else:
            grads = [a for a in torch.utils._pytree.tree_flatten(out.args[0][1:])[0]
                     if isinstance(a, fx.Node) and a in env]
            outs = [env[a] for a in grads]
        g.output(tuple(outs))
        parts.append(fx.GraphModule(gm, g))
    return parts


def _patched():
    """The patches that let Inductor schedule for a CUDA device on a machine without one."""
    import torch._inductor.scheduler as scheduler
    from torch._dynamo.device_interface import CudaInterface
    saved = [(torch.cuda, "get_device_properties"), (torch.cuda, "get_device_capability"),
             (torch.cuda, "get_device_name"), (torch.cuda, "device_count"),
             (torch.cuda, "current_device"), (scheduler, "has_triton"),
             (CudaInterface, "get_device_properties"), (CudaInterface, "is_bf16_supported")]
    saved = [(m, k, getattr(m, k)) for m, k in saved]
    torch.cuda.get_device_properties = lambda *a, **k: H100
    torch.cuda.get_device_capability = lambda *a, **k: (H100.major, H100.minor)
    torch.cuda.get_device_name = lambda *a, **k: H100.name
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    scheduler.has_triton = lambda: True
    CudaInterface.get_device_properties = staticmethod(lambda *a, **k: H100)
    CudaInterface.is_bf16_supported = staticmethod(lambda *a, **k: True)
    return saved


def _kernels_of(part, mode):
    """[(kind, {captured op name})] of one part, Inductor's scheduler nodes after fusion."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    with mode:
        inputs = []
        for n in part.graph.nodes:
            if n.op != "placeholder":
                continue
            v = n.meta.get("val")
            inputs.append(torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cuda")
                          if isinstance(v, torch.Tensor) else v)
        with fxt.preserve_node_meta():
            dec = make_fx(lambda *a: _OnCuda(part).run(*a),
                          decomposition_table=select_decomp_table())(*inputs)
    origin = {}
    for n in dec.graph.nodes:
        src = n.meta.get("from_node")
        if src:
            origin[n.name] = src[0].name
    groups = []

    def read(scheduled):
        # A kernel's own ops: those whose buffers it writes (each buffer's origin_node); the
        # others in its origins are producers Inductor inlined into it (recomputed there, as in
        # other kernels that read them): they do not join kernels together. (Llama 3's block:
        # the key's rotary embedding is inlined into both its cat kernel and GQA's expansion
        # copy; a split reduction's first stage owns no origin_node.)
        for s in scheduled:
            own, inlined = set(), set()
            for sub in s.get_nodes():
                node = sub.node
                if node is None:
                    continue
                main = getattr(node, "origin_node", None)
                if main is not None and main.name in origin:
                    own.add(origin[main.name])
                for o in node.origins:
                    if o.name in origin:
                        inlined.add(origin[o.name])
            groups.append((type(s).__name__, own, inlined - own))
        raise _Stop()
    saved_pass = config._post_fusion_custom_pass
    config._post_fusion_custom_pass = read
    try:
        with mode:
            compile_fx_inner(dec, inputs)
    except Exception:  # _Stop arrives wrapped in InductorError
        if not groups:
            raise
    finally:
        config._post_fusion_custom_pass = saved_pass
    return groups


def kernels(gm, mode):
    """({captured op name: kernel number}, [kernels per pass]) for the ops Inductor generates
    kernels for (point-wise and reduction kernels, fused or not; extern kernels such as GEMMs
    are left out) and -1 for an op Inductor makes no kernel of (a concatenation its producers
    write in place: a NopKernelSchedulerNode). A captured op whose decomposition Inductor
    spreads over several kernels (buffers of its own in each) joins them (the lowering's unit
    is the captured op); one Inductor inlines into several kernels goes with the first."""
    saved = _patched()
    try:
        fwd, bwd = _split(gm)
        parent, counts, nops, inlined_in = {}, [], set(), {}

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for part in (fwd, bwd):
            n = 0
            for kind, names, inlined in _kernels_of(part, mode):
                if kind.startswith("Nop"):
                    nops |= names | inlined
                if kind.startswith("Extern") or kind.startswith("Nop") or not (names or inlined):
                    continue
                n += 1
                if not names:  # only inlined producers' names: the kernel takes the first
                    names = {min(inlined)}
                for x in inlined:
                    inlined_in.setdefault(x, min(names))
                names = sorted(names)
                for x in names:
                    parent.setdefault(x, x)
                for x in names[1:]:
                    parent[find(x)] = find(names[0])
            counts.append(n)
        roots = sorted({find(x) for x in parent})
        number = {r: i for i, r in enumerate(roots)}
        result = {x: -1 for x in nops}
        # An op only inlined (never a buffer of its own) goes with the first kernel that
        # recomputes it.
        result.update({x: number[find(k)] for x, k in inlined_in.items() if x not in parent})
        result.update({x: number[find(x)] for x in parent})
        return result, counts
    finally:
        for m, k, v in saved:
            setattr(m, k, v)
