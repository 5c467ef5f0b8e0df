"""The `scalescope` process-group backend for torch.distributed (issue 40): the user's own
training program, unmodified, runs as a sandbox rank of a target-scale job whose other ranks are
virtual (replayed by scalescope). Every collective and point-to-point call the program makes on a
group containing the sandbox rank is recorded (kind, group, bytes, dtype, order) and completes
with the result the whole group would have produced under the **identical-replica assumption**:
the virtual ranks hold the same data as the sandbox rank (data parallelism's replicas before
their batches differ; docs/sandbox.md states it):

    all_reduce      SUM: n·x; AVG, MAX, MIN, BAND, BOR: x; PRODUCT: x^n    (n: group size)
    all_gather      the input, n times
    reduce_scatter  SUM: n·(this rank's chunk of the input); AVG, MAX, MIN: the chunk
    all_to_all      from every peer the chunk addressed to this rank: this rank's own chunk for
                    itself, n times (split sizes as given; uneven splits: each peer's part for
                    this rank has this rank's input-split size)
    broadcast       the input (every replica holds the root's data)
    send            recorded; recv: the buffer as an identical peer would send it (unchanged)
    barrier         recorded

Only groups that contain the sandbox rank are instantiated (torch.distributed creates no backend
for a group the calling rank is not in: PrismLLM's group reduction). Calls return completed
Work objects: the program's wall-clock pace never enters simulated time, which scalescope
computes from the record (`SCALESCOPE_SANDBOX_LOG`, one JSON object a line)."""
import json
import os
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

_SUM, _AVG, _PRODUCT = dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT
_UNCHANGED = {dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.BAND, dist.ReduceOp.BOR}


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


class Recorder:
    """The calls of this process, in order, to a JSON-lines file (or kept in memory)."""

    def __init__(self, path=None):
        self.path = path
        self.calls = []
        self._lock = threading.Lock()
        self._file = open(path, "a") if path else None

    def add(self, **call):
        with self._lock:
            call["seq"] = len(self.calls)
            self.calls.append(call)
            if self._file:
                self._file.write(json.dumps(call) + "\n")
                self._file.flush()


RECORDER = Recorder(os.environ.get("SCALESCOPE_SANDBOX_LOG"))


def _op_name(op):
    for name in ("SUM", "AVG", "PRODUCT", "MAX", "MIN", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name, None):
            return name.lower()
    return str(op)


_CALLS = {"allreduce", "allreduce_coalesced", "allgather", "_allgather_base",
          "allgather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
          "reduce_scatter_tensor_coalesced", "alltoall_base", "alltoall", "broadcast", "reduce",
          "scatter", "gather", "send", "recv", "barrier"}


class ScalescopeProcessGroup(dist.ProcessGroup):
    """A group of `size` ranks in which this process is rank `rank`; the others are virtual."""

    def __init__(self, rank, size, ranks=None, name=""):
        super().__init__(rank, size)
        self.global_ranks = list(ranks) if ranks is not None else None
        self.label = name

    # torch keeps a group's name on its backends; this group is its own backend (a Python
    # ProcessGroup), so it keeps the name torch gives it: DeviceMesh and the functional
    # collectives (DTensor) find groups by it.
    @property
    def group_name(self):
        return self.label

    def _set_group_name(self, name):
        self.label = name

    @property
    def group_desc(self):
        return getattr(self, "_desc", "")

    def _set_group_desc(self, desc):
        self._desc = desc

    # -- helpers --
    def _done(self, result):
        fut = Future()
        fut.set_result(result)
        return _create_work_from_future(fut)

    def _record(self, kind, tensors, outputs=(), **extra):
        """Records the call (nccl-tests' size from `tensors`) in the program's order; the ops that
        later read one of `outputs` wait for it (OpRecorder)."""
        _IN_BACKEND.on = True  # until _done: the fill below is not the program's
        ts = [t for t in tensors if isinstance(t, torch.Tensor)]
        RECORDER.add(kind=kind, group=self.label, group_size=self.size(), rank=self.rank(),
                     bytes=_nbytes(ts),
                     dtype=str(ts[0].dtype).replace("torch.", "") if ts else "",
                     shape=list(ts[0].shape) if ts else [], **extra)
        OPS.collective(RECORDER.calls[-1]["seq"], outputs)

    def _reduce(self, t, op):
        n = self.size()
        if op == _SUM:
            t.mul_(n)
        elif op == _PRODUCT:
            t.pow_(n)
        elif op != _AVG and op not in _UNCHANGED:
            raise RuntimeError(f"scalescope backend: reduce op {_op_name(op)} is not modelled")

    # -- collectives --
    def allreduce(self, tensors, opts):
        op = opts.reduceOp if hasattr(opts, "reduceOp") else opts
        self._record("all_reduce", tensors, tensors, op=_op_name(op))
        for t in tensors:
            self._reduce(t, op)
        return self._done(tensors)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def allgather(self, output_lists, inputs, opts=None):
        # nccl-tests' size: the gathered output
        outs = [o for outs in output_lists for o in outs]
        self._record("all_gather", outs, outs)
        for outs, x in zip(output_lists, inputs):
            for o in outs:
                o.copy_(x)
        return self._done(output_lists)

    def _allgather_base(self, output, input, opts=None):
        self._record("all_gather", [output], [output])
        output.copy_(input.reshape(1, -1).expand(self.size(), -1).reshape(output.shape))
        return self._done([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return self._done(outputs)

    def _chunk(self, x):
        return x.reshape(self.size(), -1)[self.rank()]

    def reduce_scatter(self, outputs, input_lists, opts):
        self._record("reduce_scatter", [i for ins in input_lists for i in ins], outputs,
                     op=_op_name(opts.reduceOp))
        for o, ins in zip(outputs, input_lists):
            o.copy_(ins[self.rank()])
            self._reduce(o, opts.reduceOp)
        return self._done(outputs)

    def _reduce_scatter_base(self, output, input, opts):
        self._record("reduce_scatter", [input], [output], op=_op_name(opts.reduceOp))
        output.copy_(self._chunk(input).reshape(output.shape))
        self._reduce(output, opts.reduceOp)
        return self._done([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return self._done(outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        self._record("all_to_all", [input], [output], input_splits=list(input_split_sizes),
                     output_splits=list(output_split_sizes))
        n, r = self.size(), self.rank()
        if not input_split_sizes:
            mine = self._chunk(input)
            output.copy_(mine.reshape(1, -1).expand(n, -1).reshape(output.shape))
        else:
            start = sum(input_split_sizes[:r])
            mine = input.narrow(0, start, input_split_sizes[r])
            at = 0
            for size in (output_split_sizes or [input_split_sizes[r]] * n):
                k = min(size, mine.shape[0])
                output.narrow(0, at, k).copy_(mine.narrow(0, 0, k))
                at += size
        return self._done([output])

    def alltoall(self, outputs, inputs, opts=None):
        self._record("all_to_all", inputs, outputs)
        for o in outputs:
            o.copy_(inputs[self.rank()])
        return self._done(outputs)

    def broadcast(self, tensors, opts):
        self._record("broadcast", tensors, tensors, root=getattr(opts, "rootRank", 0))
        return self._done(tensors)

    def reduce(self, tensors, opts):
        self._record("reduce", tensors, tensors, op=_op_name(opts.reduceOp), root=opts.rootRank)
        if self.rank() == opts.rootRank:
            for t in tensors:
                self._reduce(t, opts.reduceOp)
        return self._done(tensors)

    def scatter(self, outputs, input_lists, opts):
        # Every replica's root holds what this rank's would: its own chunk of it (the program's
        # list where it gave one, else the output left as it is).
        root = getattr(opts, "rootRank", 0)
        self._record("scatter", [t for ins in input_lists for t in ins] or outputs, outputs,
                     root=root)
        for o, ins in zip(outputs, input_lists):
            if ins:
                o.copy_(ins[self.rank()])
        return self._done(outputs)

    def gather(self, output_lists, inputs, opts):
        root = getattr(opts, "rootRank", 0)
        self._record("gather", inputs, [t for outs in output_lists for t in outs], root=root)
        if self.rank() == root:
            for outs, i in zip(output_lists, inputs):
                for o in outs:
                    o.copy_(i)
        return self._done(output_lists)

    def send(self, tensors, dst, tag=0):
        self._record("send", tensors, peer=dst, tag=tag)
        return self._done(tensors)

    def recv(self, tensors, src, tag=0):
        self._record("recv", tensors, tensors, peer=src, tag=tag)
        return self._done(tensors)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("scalescope backend: recv from any source is not modelled (its peer "
                           "is chosen at run time)")

    def barrier(self, opts=None):
        self._record("barrier", [])
        return self._done([])

    def getBackendName(self):
        return "scalescope"

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name in _CALLS and callable(attr):
            def call(*args, **kwargs):
                try:
                    return attr(*args, **kwargs)
                finally:
                    _IN_BACKEND.on = False  # the fill of its results was not the program's
            return call
        return attr

    def name(self):
        return "scalescope"


def create(store, rank, size, timeout):
    """torch.distributed's backend creator (Backend.register_backend)."""
    return ScalescopeProcessGroup(rank, size)


def create_extended(opts, backend_options):
    """The extended creator: the group's global ranks and name are known (recorded per call)."""
    ranks = list(opts.global_ranks_in_group or []) or list(range(opts.group_size))
    # The group's members once (the world's as "all"), its calls name it.
    world = int(os.environ.get("WORLD_SIZE", opts.group_size))
    RECORDER.add(kind="group", group=opts.group_id, group_size=opts.group_size,
                 rank=opts.group_rank,
                 ranks="all" if ranks == list(range(world)) else ranks)
    return ScalescopeProcessGroup(opts.group_rank, opts.group_size, ranks, opts.group_id)


def register():
    """Registers the backend as "scalescope" for CPU and CUDA tensors."""
    if "scalescope" not in dist.Backend.backend_list:
        dist.Backend.register_backend("scalescope", create_extended, extended_api=True,
                                      devices=["cpu", "cuda"])


def install():
    """Makes every process group of this program a scalescope one: init_process_group and
    new_group take backend "scalescope" whatever the program names ("nccl", "gloo",
    "cuda:nccl,cpu:gloo"), and the default group needs no rendezvous (its other ranks are
    virtual): an in-process store. RANK and WORLD_SIZE come from the environment scalescope
    sets (the target job's)."""
    register()
    c10d = dist.distributed_c10d
    original_init, original_new_group = c10d.init_process_group, c10d.new_group

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                           rank=-1, store=None, group_name="", pg_options=None, device_id=None,
                           **kwargs):
        world_size = world_size if world_size not in (-1, None) else int(os.environ["WORLD_SIZE"])
        rank = rank if rank not in (-1, None) else int(os.environ["RANK"])
        RECORDER.add(kind="init_process_group", requested_backend=str(backend),
                     world_size=world_size, rank=rank)
        kw = dict(backend="scalescope", world_size=world_size, rank=rank,
                  store=store if store is not None else dist.HashStore(), group_name=group_name,
                  **kwargs)
        if timeout is not None:
            kw["timeout"] = timeout
        return original_init(**kw)

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None, *args, **kwargs):
        return original_new_group(ranks, timeout, None, None, *args, **kwargs)

    import torch.distributed.device_mesh as device_mesh  # imported the originals by name
    for module in (dist, c10d, device_mesh):
        if hasattr(module, "init_process_group"):
            module.init_process_group = init_process_group
        if hasattr(module, "new_group"):
            module.new_group = new_group
    # Iteration boundaries: every optimizer step (torch.optim's global post-step hook).
    from torch.optim.optimizer import register_optimizer_step_post_hook
    first = []

    def stepped(opt, args, kwargs):
        # An iteration ends where the first optimizer to step steps again (a program with
        # several optimizers steps each once an iteration).
        if not first:
            first.append(id(opt))
        if id(opt) == first[0]:
            ops, peak, live = OPS.flush()
            RECORDER.add(kind="step", ops=ops, peak_bytes=peak, live_bytes=live)
    register_optimizer_step_post_hook(stepped)


_IN_BACKEND = threading.local()


def _tensor_meta(x):
    return [list(x.shape), str(x.dtype).replace("torch.", "")]


def _storage(x):
    try:
        return x.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


class OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """The program's own ATen ops, as the dispatcher sees them below autograd (the kernels an
    eager program launches), in order, with the collectives between them, flushed into the
    record at each optimizer step as that step's "ops": [op, [[shape, dtype] inputs], [[shape,
    dtype] outputs], [collectives it waits for], {"alloc": bytes its outputs newly hold, "freed":
    bytes released since the op before, "new": the bytes of each storage it made (numbered in
    order over the run), "gone": the numbers of those released since the op before, "causal": an
    attention's is_causal, "gpu_ns": its kernels' time on a GPU}] or {"call": seq}
    for a collective. An op waits for a collective when it is the first to read that
    collective's output (by storage). The backend's own arithmetic (filling collective results)
    is left out."""

    def __init__(self):
        super().__init__()
        self.sequence = []
        self.pending = {}  # storage pointer → the collective that wrote it, until first read
        # The program's own allocations: each storage an op's output holds, alive while some
        # tensor on it is (a weak reference on each); live bytes and their peak since the last
        # flush.
        self.storages = {}  # storage pointer → [bytes, tensors alive on it, creation number]
        self.live = self.peak = 0
        self.freed = 0  # bytes released since the last op recorded
        self.created = 0  # storages created so far (each one's number, from 0)
        self.new, self.gone = [], []  # this op's new storages' bytes; numbers released since
        # On a GPU: each op's kernels timed with CUDA events (entry → (start, end)), read at
        # the flush. A sleep kernel before each keeps the GPU busy while the host launches
        # the op, so that the events bracket the op's kernels only, not the host's launch.
        self.timing = False
        self.events = []

    def _allocated(self, x):
        ptr = _storage(x)
        if not ptr:
            return
        entry = self.storages.get(ptr)
        if entry is None:
            entry = self.storages[ptr] = [x.untyped_storage().nbytes(), 0, self.created]
            self.created += 1
            self.new.append(entry[0])
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(x, self._released, ptr)

    def _released(self, ptr):
        entry = self.storages.get(ptr)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.live -= entry[0]
                self.freed += entry[0]
                self.gone.append(entry[2])
                del self.storages[ptr]

    def collective(self, seq, outputs):
        self.sequence.append({"call": seq})
        for t in outputs:
            if isinstance(t, torch.Tensor):
                ptr = _storage(t)
                if ptr:
                    self.pending[ptr] = seq

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        timed = None
        if self.timing and not getattr(_IN_BACKEND, "on", False) and any(
                isinstance(x, torch.Tensor) and x.is_cuda
                for x in torch.utils._pytree.tree_leaves((args, kwargs))):
            torch.cuda._sleep(SLEEP_CYCLES)
            timed = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            timed[0].record()
        out = func(*args, **(kwargs or {}))
        if timed is not None:
            timed[1].record()
        if not getattr(_IN_BACKEND, "on", False):
            flat_in = [x for x in torch.utils._pytree.tree_leaves((args, kwargs))
                       if isinstance(x, torch.Tensor)]
            flat_out = [x for x in torch.utils._pytree.tree_leaves(out)
                        if isinstance(x, torch.Tensor)]
            waits = []
            if self.pending:
                for x in flat_in:
                    seq = self.pending.pop(_storage(x), None)
                    if seq is not None and seq not in waits:
                        waits.append(seq)
            extra = {}
            entry = [str(func).replace("aten.", "", 1), [_tensor_meta(x) for x in flat_in],
                     [_tensor_meta(x) for x in flat_out], waits, extra]
            if "attention" in entry[0]:  # its is_causal (by its schema), which halves its work
                schema = func._schema
                for k, arg in enumerate(schema.arguments):
                    if arg.name == "is_causal":
                        v = (kwargs or {}).get("is_causal",
                                               args[k] if k < len(args) else arg.default_value)
                        extra["causal"] = bool(v)
            self.sequence.append(entry)
            before = self.live
            for x in flat_out:
                if not isinstance(x, torch._subclasses.FakeTensor):
                    self._allocated(x)
            extra["alloc"], extra["freed"], self.freed = self.live - before, self.freed, 0
            # The storages themselves, for the caching allocator's replay: those this op made
            # (bytes, numbered in order from 0 over the whole run) and those released before it.
            if self.new:
                extra["new"], self.new = self.new, []
            if self.gone:
                extra["gone"], self.gone = self.gone, []
            if timed is not None:
                self.events.append((extra, timed))
        return out

    def flush(self):
        """This iteration's ops, and its peak and end-of-iteration live bytes."""
        if self.events:  # the GPU times of this iteration's ops ("gpu_ns")
            torch.cuda.synchronize()
            for extra, (start, end) in self.events:
                extra["gpu_ns"] = int(round(start.elapsed_time(end) * 1e6))
            self.events = []
        ops, self.sequence = self.sequence, []
        peak, self.peak = self.peak, self.live
        self.freed = 0  # what is released from here on: the next iteration's
        return ops, peak, self.live


OPS = OpRecorder()


# The sleep before a timed op: 2·10⁵ cycles, about 0.1 ms at an H100's or H200's 1.98 GHz
# boost clock, longer than the host takes to launch one eager op (a few to tens of µs).
SLEEP_CYCLES = 200_000


def start_op_recording():
    """Enters the op recorder for the program's main thread (the sandbox's start-up); on a GPU
    its ops' kernels are timed (CUDA events), and the device is recorded."""
    if torch.cuda.is_available():
        OPS.timing = True
        RECORDER.add(kind="device", name=torch.cuda.get_device_name(),
                     timing="CUDA events around each op, a sleep kernel before it")
    OPS.__enter__()


def _cpu(d):
    """A device argument naming CUDA, as the CPU; anything else as it is."""
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("cpu")
    if isinstance(d, str) and d.startswith("cuda"):
        return "cpu"
    if isinstance(d, int) and not isinstance(d, bool):
        return d
    return d


class CudaOnCpu(torch.overrides.TorchFunctionMode):
    """A machine without a GPU runs a program written for CUDA: tensors it puts on a CUDA
    device stay on the CPU (device arguments of factories and `.to`, `.cuda()`, `pin_memory`),
    so that the program's own code runs unmodified; its ops are costed for the target GPU by
    scalescope, never timed here."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in ("cuda", "pin_memory") and args and isinstance(args[0], torch.Tensor):
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if name == "to":
            args = tuple(_cpu(a) for a in args)
        return func(*args, **kwargs)


CUDA_ON_CPU = CudaOnCpu()


def run_cuda_on_cpu():
    """What a CUDA program calls on the device that a CPU-only machine cannot do, made harmless
    (set_device, synchronize, streams' waits), DistributedDataParallel's device_ids dropped for a
    module on the CPU, and the device arguments mapped (CudaOnCpu)."""
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    from torch.nn.parallel import DistributedDataParallel
    init = DistributedDataParallel.__init__

    def ddp_init(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if all(p.device.type == "cpu" for p in module.parameters()):
            device_ids, output_device = None, None
        init(self, module, device_ids, output_device, *args, **kwargs)
    DistributedDataParallel.__init__ = ddp_init
    # Mixed precision as on the GPU: autocast for "cuda" becomes the CPU's autocast in the same
    # dtype (bf16 or fp16), so that the program's GEMMs and activations have the dtypes they
    # would have there (its memory, its kernels' bytes). CUDA's default autocast dtype is fp16.
    import torch.amp.autocast_mode as autocast_mode
    original = autocast_mode.autocast

    class CudaAutocastOnCpu(original):
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            if device_type == "cuda":
                device_type, dtype = "cpu", dtype or torch.float16
            super().__init__(device_type, dtype=dtype, enabled=enabled,
                             cache_enabled=cache_enabled)
    for module in (torch, torch.amp, autocast_mode):
        module.autocast = CudaAutocastOnCpu
    torch.cuda.amp.autocast = lambda enabled=True, dtype=torch.float16, cache_enabled=True: \
        CudaAutocastOnCpu("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    CUDA_ON_CPU.__enter__()
