"""Reading scalescope's results.h5 (layout: docs/formats.md), shared by the scripts in scripts/post/.

Every failure to read — a missing or corrupt file, a missing attribute, dataset or field, a wrong
format version — is raised as ResultsError with a one-line message naming the file and the object;
run_main() turns it into `<script>: error: <message>` on stderr and exit status 1.
"""

import os
import sys
import tempfile

import numpy as np

try:
    import h5py
except ImportError:  # reported by run_main as one line
    h5py = None

FORMAT_VERSION = 1
GIB = float(2 ** 30)

# /summary attributes in the order of summary.json (and of the printed tables).
SUMMARY_KEYS = ("world_size", "iteration_time_s", "iteration_time_ns", "tokens_per_s",
                "model_tflops_per_gpu", "mfu", "peak_memory_bytes", "model", "gpu",
                "tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_gpu")
# /ranks columns; the time terms add up to finish_ns.
RANK_COLUMNS = ("finish_ns", "compute_ns", "exposed_tp_ns", "exposed_pp_ns", "exposed_dp_ns",
                "exposed_embedding_ns", "exposed_cp_ns", "exposed_ep_ns", "bubble_ns",
                "straggler_wait_ns", "host_wait_ns",
                "other_wait_ns", "peak_memory_bytes",
                "static_memory_bytes", "pp_stage", "class")
BREAKDOWN_TERMS = (("compute", "compute_ns"), ("exposed_tp", "exposed_tp_ns"),
                   ("exposed_pp", "exposed_pp_ns"), ("exposed_dp", "exposed_dp_ns"),
                   ("exposed_embedding", "exposed_embedding_ns"), ("exposed_cp", "exposed_cp_ns"),
                   ("exposed_ep", "exposed_ep_ns"), ("bubble", "bubble_ns"),
                   ("straggler_wait", "straggler_wait_ns"), ("host_wait", "host_wait_ns"), ("other_wait", "other_wait_ns"))
# Columns added later: a file written before them reads as zeros there.
OPTIONAL_RANK_COLUMNS = ("host_wait_ns", "straggler_wait_ns")
ENGINE_KEYS = ("kind", "processes", "events_processed", "events_committed", "events_rolled_back",
               "remote_messages", "gvt_rounds", "wall_s", "events_per_virtual_rank",
               "lp_state_bytes_per_virtual_rank")
# Written since session 16 (files of earlier versions lack them; replicas since session 17,
# fossil_visits since session 28, max_run_ahead_s since session 29).
ENGINE_KEYS_NEWER = ("rollbacks", "anti_messages", "committed_at_execution", "gvt_s", "idle_s",
                     "replicas", "replica_count", "replayed_ranks", "fossil_visits",
                     "max_run_ahead_s")
# /engine/process_<field> datasets of an optimistic run, one row per process, in summary.json's
# per_process order (efficiency is derived).
ENGINE_PROCESS_FIELDS = ("events_processed", "events_committed", "events_rolled_back",
                         "anti_messages", "remote_messages", "committed_at_execution", "wall_s",
                         "gvt_s", "idle_s")
TIMELINE_FIELDS = ("start_ns", "end_ns", "op", "stream", "kind", "phase", "name", "layer",
                   "microbatch")
MEMORY_FIELDS = ("time_ns", "live_bytes")
DECODING_TABLES = ("stream_names", "op_names", "kind_names", "phase_names")
NONE_U16 = 65535  # layer / microbatch not set


# Range checks on what results.h5 holds (issue 38): simulated time is int64 nanoseconds below
# 2^62 (src/core/sim_time.hpp kTimeLimit), memory below 2^50 bytes (io/graph_h5.cpp kMaxBytes),
# worlds at most 2^24 ranks (io::kMaxWorld).
TIME_LIMIT_NS = 2 ** 62
MAX_BYTES = 2 ** 50
MAX_WORLD = 2 ** 24
MEMORY_COLUMNS = ("peak_memory_bytes", "static_memory_bytes")
# What summary.json must hold for the report, and the figures results.h5 repeats.
SUMMARY_JSON_KEYS = ("world_size", "iteration_time_s", "tokens_per_s", "model_tflops_per_gpu",
                     "mfu", "peak_memory_bytes", "peak_memory_bytes_by_pp_stage", "model", "gpu",
                     "engine", "time_breakdown_s", "time_breakdown_rank")
SHARED_SUMMARY_KEYS = ("world_size", "iteration_time_s", "tokens_per_s", "model_tflops_per_gpu",
                       "mfu", "peak_memory_bytes", "peak_memory_bytes_by_pp_stage", "model", "gpu")


class ResultsError(Exception):
    """A results file that cannot be read as scalescope's results.h5 (one-line message)."""


def _plain(value):
    """An h5py attribute value as a plain Python value (str, int, float, list)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


class Results:
    """An open results.h5. Use as a context manager; every accessor raises ResultsError."""

    def __init__(self, path):
        self.path = path
        self.label = os.path.basename(path) or path
        if h5py is None:
            raise ResultsError("h5py is not installed (apt-get install python3-h5py)")
        if not os.path.exists(path):
            raise ResultsError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ResultsError(f"{path}: is a directory, not a results.h5 file")
        try:
            self._f = h5py.File(path, "r")
        except OSError as e:
            raise ResultsError(f"{path}: cannot open as an HDF5 file ({_reason(e)})") from None
        version = self.attr("meta", "format_version")
        if version != FORMAT_VERSION:
            raise ResultsError(f"{path}: /meta format_version is {version}, "
                               f"this script reads {FORMAT_VERSION}")

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- low level -------------------------------------------------------------------------

    def _error(self, obj, what):
        return ResultsError(f"{self.path}: /{obj.strip('/')}: {what}")

    def node(self, name):
        """The group or dataset at `name`."""
        try:
            return self._f[name]
        except KeyError:
            raise self._error(name, "missing") from None
        except (OSError, RuntimeError, ValueError) as e:
            raise self._error(name, f"unreadable ({_reason(e)})") from None

    def has(self, name):
        try:
            return name in self._f
        except (OSError, RuntimeError, ValueError):
            return False

    def has_attr(self, obj, key):
        try:
            return key in self._f[obj].attrs
        except (KeyError, OSError, RuntimeError, ValueError):
            return False

    def attr(self, obj, key):
        node = self.node(obj)
        try:
            return _plain(node.attrs[key])
        except KeyError:
            raise self._error(obj, f"attribute '{key}' missing") from None
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            raise self._error(obj, f"attribute '{key}' unreadable ({_reason(e)})") from None

    def attrs(self, obj):
        """All attributes of `obj` as a dict of plain values."""
        node = self.node(obj)
        try:
            return {k: _plain(node.attrs[k]) for k in sorted(node.attrs.keys())}
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            raise self._error(obj, f"attributes unreadable ({_reason(e)})") from None

    def dataset(self, name, fields=None):
        """The whole dataset as a numpy array; `fields`: compound fields that must be present."""
        node = self.node(name)
        if not isinstance(node, h5py.Dataset):
            raise self._error(name, "is a group, not a dataset")
        if fields:
            names = node.dtype.names or ()
            missing = [f for f in fields if f not in names]
            if missing:
                raise self._error(name, f"field {', '.join(missing)} missing")
        try:
            return node[()]
        except (OSError, RuntimeError, ValueError) as e:
            raise self._error(name, f"unreadable ({_reason(e)})") from None

    def objects(self, exclude=()):
        """{'/path': 'group' | 'dataset'} of every object in the file (the root included),
        leaving out the top-level groups named in `exclude` and everything under them."""
        out = {"/": "group"}

        def visit(name, obj):
            if name.split("/", 1)[0] in exclude:
                return
            out["/" + name] = "dataset" if isinstance(obj, h5py.Dataset) else "group"

        try:
            self._f.visititems(visit)
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            raise ResultsError(f"{self.path}: cannot list its objects ({_reason(e)})") from None
        return out

    # -- the layout of docs/formats.md ---------------------------------------------------------

    def summary(self):
        """/summary attributes (SUMMARY_KEYS) plus peak_memory_bytes_by_pp_stage (a list),
        range-checked."""
        s = {k: self.attr("summary", k) for k in SUMMARY_KEYS}
        s["peak_memory_bytes_by_pp_stage"] = [
            int(v) for v in self.dataset("summary/peak_memory_bytes_by_pp_stage")]
        self._check_range("summary", "world_size", s["world_size"], 1, MAX_WORLD)
        self._check_range("summary", "iteration_time_ns", s["iteration_time_ns"], 0,
                          TIME_LIMIT_NS)
        self._check_range("summary", "peak_memory_bytes", s["peak_memory_bytes"], 0, MAX_BYTES)
        for k in ("iteration_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu"):
            self._check_range("summary", k, s[k], 0, float("inf"))
        if abs(s["iteration_time_s"] - s["iteration_time_ns"] * 1e-9) > 1e-9:
            raise self._error("summary", f"iteration_time_s {s['iteration_time_s']} is not "
                              f"iteration_time_ns {s['iteration_time_ns']} in seconds")
        return s

    def _check_range(self, obj, key, value, low, high):
        try:
            ok = low <= value <= high  # NaN compares false
        except TypeError:
            ok = False
        if not ok:
            raise self._error(obj, f"{key}={value} is outside [{low}, {high}]: a damaged file")

    def check_summary_json(self, s, json_path):
        """Refuses a summary.json `s` that is not of this file's run (or lacks a figure)."""
        for k in SUMMARY_JSON_KEYS:
            if k not in s:
                raise ResultsError(f"{json_path}: no '{k}' (damaged, or written by another "
                                   "version)")
        self.check_breakdown()
        mine = self.summary()
        for k in SHARED_SUMMARY_KEYS:
            a, b = mine[k], s[k]
            if isinstance(a, float) or isinstance(b, float):
                same = isinstance(b, (int, float)) and abs(a - b) <= 1e-12 * max(abs(a), abs(b))
            else:
                same = _plain(a) == b
            if not same:
                raise ResultsError(f"{self.path}: /summary {k}={_plain(a)} but {json_path} has "
                                   f"{b}: the two files are not of one run (or one is damaged)")

    def summary_attr_or(self, key, default):
        """A /summary attribute written only by some runs (software_stack, the fp8 peak)."""
        a = self._f["summary"].attrs
        if key not in a:
            return default
        v = a[key]
        return v.decode() if isinstance(v, bytes) else (str(v) if isinstance(default, str) else float(v))

    def memory_check(self):
        """/memory_check as summary.json's "memory" object (None in files without it)."""
        if "memory_check" not in self._f:
            return None
        a = self.attrs("memory_check")
        stage = int(a["tightest_pp_stage"])
        totals = [int(v) for v in self.dataset("memory_check/total_bytes_by_pp_stage")]
        names = sorted(self._f["memory_check/breakdown"].keys())
        breakdown = {n[:-len("_bytes_by_pp_stage")]:
                     int(self.dataset(f"memory_check/breakdown/{n}")[stage]) for n in names}
        out = {"fits": bool(a["fits"]), "capacity_bytes": int(a["capacity_bytes"]),
               "tightest_rank": int(a["tightest_rank"]), "tightest_pp_stage": stage}
        # allocated / reserved (docs/model.md "Memory capacity"), in files written since issue 36
        extra = {}
        for name in ("allocated", "reserved"):
            path = f"memory_check/{name}_bytes_by_pp_stage"
            if path in self._f:
                v = [int(x) for x in self.dataset(path)]
                out[f"peak_{name}_bytes"] = max(v)
                extra[f"{name}_bytes_by_pp_stage"] = v
        out.update({"peak_total_bytes": totals[stage], "dominant_class": str(a["dominant_class"]),
                    "breakdown_bytes": breakdown, "total_bytes_by_pp_stage": totals})
        out.update(extra)
        return out

    def critical_path(self):
        """/critical_path as summary.json's "critical_path" object (None in files without it)."""
        if "critical_path" not in self._f:
            return None
        kinds = [str(k) for k in self.attr("critical_path", "kinds")]
        totals = [int(v) for v in self.dataset("critical_path/totals_ns")]
        ranks = self.dataset("critical_path/rank")
        return {"totals_s": {k: t * 1e-9 for k, t in zip(kinds, totals)},
                "segments": int(len(ranks)), "ranks_visited": int(len(set(ranks.tolist())))}

    def whatif(self):
        """summary.json's "whatif" object from /summary's attributes (None without what-ifs)."""
        if not self.has_attr("summary", "whatif"):
            return None
        base = float(self.attr("summary", "whatif_baseline_iteration_time_s"))
        it = float(self.attr("summary", "iteration_time_s"))
        base_ns = int(self.attr("summary", "whatif_baseline_iteration_time_ns"))
        it_ns = int(self.attr("summary", "iteration_time_ns"))
        return {"applied": [str(w) for w in self.attr("summary", "whatif")],
                "baseline_iteration_time_s": base, "iteration_time_s": it,
                "change": it_ns / base_ns - 1}

    def ranks(self):
        """/ranks columns as numpy arrays (all of length world_size)."""
        cols = {c: self.dataset(f"ranks/{c}") for c in RANK_COLUMNS
                if c not in OPTIONAL_RANK_COLUMNS or self.has(f"ranks/{c}")}
        n = len(cols["finish_ns"])
        for c in OPTIONAL_RANK_COLUMNS:
            cols.setdefault(c, np.zeros(n, dtype=np.int64))
        for c, v in cols.items():
            if v.ndim != 1 or len(v) != n:
                raise self._error(f"ranks/{c}", f"shape {v.shape}, expected ({n},)")
        # Ranges (the breakdown's identity: check_breakdown).
        for c, v in cols.items():
            high = (MAX_BYTES if c in MEMORY_COLUMNS else
                    n - 1 if c == "pp_stage" else 2 ** 31 if c == "class" else TIME_LIMIT_NS)
            if n and (not np.issubdtype(v.dtype, np.integer) or v.min() < 0 or v.max() > high):
                bad = int(np.argmax((v < 0) | (v > high))) if np.issubdtype(
                    v.dtype, np.integer) else 0
                raise self._error(f"ranks/{c}", f"rank {bad}: {v[bad]} is outside [0, {high}]: "
                                  "a damaged file")
        return cols

    def check_breakdown(self):
        """Refuses /ranks whose time terms do not add up to finish_ns (as the engine writes
        them; compare.py reads files whose values were moved on purpose, so it does not ask)."""
        cols = self.ranks()
        total = np.zeros(len(cols["finish_ns"]), dtype=np.int64)
        for _, c in BREAKDOWN_TERMS:
            total += cols[c].astype(np.int64)
        if not np.array_equal(total, cols["finish_ns"].astype(np.int64)):
            bad = int(np.argmax(total != cols["finish_ns"]))
            raise self._error("ranks", f"rank {bad}: the time terms add up to {total[bad]} ns, "
                              f"not its finish_ns {cols['finish_ns'][bad]}: a damaged file")

    def engine(self):
        """/engine attributes plus the derived efficiency and committed_events_per_s."""
        e = {k: self.attr("engine", k) for k in ENGINE_KEYS}
        e.update({k: self.attr("engine", k) for k in ENGINE_KEYS_NEWER
                  if self.has_attr("engine", k)})
        e["efficiency"] = (e["events_committed"] / e["events_processed"]
                           if e["events_processed"] else 1.0)
        e["committed_events_per_s"] = e["events_committed"] / e["wall_s"] if e["wall_s"] else 0.0
        if self.has("engine/process_events_processed"):
            cols = {f: [_plain(v) for v in self.dataset(f"engine/process_{f}")]
                    for f in ENGINE_PROCESS_FIELDS}
            rows = []
            for i in range(len(cols["events_processed"])):
                row = {f: cols[f][i] for f in ENGINE_PROCESS_FIELDS}
                row["efficiency"] = (row["events_committed"] / row["events_processed"]
                                     if row["events_processed"] else 1.0)
                rows.append(row)
            e["per_process"] = rows
        return e

    def config_text(self):
        return self.attr("meta", "config_text")

    def traced_ranks(self):
        """Ranks with a /timeline dataset, ascending."""
        return sorted(int(k) for k in self.node("timeline").keys() if k.isdigit())

    def memory_ranks(self):
        """Ranks with a /memory dataset, ascending."""
        return sorted(int(k) for k in self.node("memory").keys() if k.isdigit())

    def decoding_tables(self):
        """{'stream_names': [...], 'op_names': [...], 'kind_names': [...], 'phase_names': [...]}"""
        return {t: list(self.attr("timeline", t)) for t in DECODING_TABLES}

    def timeline(self, rank):
        """The structured array /timeline/<rank> (fields TIMELINE_FIELDS)."""
        return self.dataset(f"timeline/{rank}", TIMELINE_FIELDS)

    def memory(self, rank):
        """The structured array /memory/<rank> (fields time_ns, live_bytes)."""
        return self.dataset(f"memory/{rank}", MEMORY_FIELDS)

    def check_traced(self, ranks, available=None):
        """Raises ResultsError naming the traced ranks if any of `ranks` was not traced."""
        available = self.traced_ranks() if available is None else available
        missing = [r for r in ranks if r not in available]
        if missing:
            which = ", ".join(map(str, missing))
            plural = "s" if len(missing) > 1 else ""
            traced = ", ".join(map(str, available)) or "none (run.trace_ranks is empty)"
            raise ResultsError(f"{self.path}: rank{plural} {which} not traced "
                               f"(traced ranks: {traced})")


def _reason(e):
    """A one-line reason from an h5py / OS exception."""
    text = " ".join(str(e).split())
    return text or type(e).__name__


# -- derived figures --------------------------------------------------------------------------

def time_breakdown(ranks):
    """(rank, {term: seconds}) of the rank that finishes last (the lowest one on a tie)."""
    finish = ranks["finish_ns"]
    if len(finish) == 0:
        return None, {}
    r = int(np.argmax(finish))  # argmax returns the first maximum
    return r, {term: int(ranks[col][r]) * 1e-9 for term, col in BREAKDOWN_TERMS}


def stage_table(ranks):
    """One dict per pipeline stage, in stage order, computed from the /ranks columns.

    Times are seconds: finish max / min over the stage's ranks and the mean of each term of the
    breakdown; memory is the maximum over the stage's ranks in bytes."""
    stages = []
    pp = ranks["pp_stage"]
    for s in sorted(set(int(v) for v in pp)):
        sel = pp == s
        members = np.nonzero(sel)[0]
        row = {
            "stage": s,
            "ranks": int(len(members)),
            "rank_list": [int(r) for r in members],
            "finish_max_s": int(ranks["finish_ns"][sel].max()) * 1e-9,
            "finish_min_s": int(ranks["finish_ns"][sel].min()) * 1e-9,
        }
        for term, col in BREAKDOWN_TERMS:
            row[f"{term}_mean_s"] = float(ranks[col][sel].mean()) * 1e-9
        row["peak_memory_bytes"] = int(ranks["peak_memory_bytes"][sel].max())
        row["static_memory_bytes"] = int(ranks["static_memory_bytes"][sel].max())
        stages.append(row)
    return stages


def rank_ranges(ranks, limit=24):
    """'0-3,8-11' for a sorted rank list, cut to `limit` characters with '…'."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    text = ",".join(parts)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parse_ranks(text):
    """'0,8,16-19' → [0, 8, 16, 17, 18, 19]; raises ValueError with a readable message."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ValueError(f"bad rank list '{text}' (expected e.g. 0,8 or 0-3)") from None
    if not out or min(out) < 0:
        raise ValueError(f"bad rank list '{text}' (expected e.g. 0,8 or 0-3)")
    return sorted(set(out))


# -- script plumbing --------------------------------------------------------------------------

def import_pyplot():
    """matplotlib.pyplot on the headless Agg backend; ResultsError if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ResultsError("matplotlib is not installed "
                           "(apt-get install --no-install-recommends python3-matplotlib)") from None
    return plt


def write_via_temporary(path, writer, mode="wb"):
    """Calls writer(file) on a temporary file beside `path`, then renames it to `path`, so `path`
    is never partial; ResultsError (one line) when it cannot be written."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ResultsError(f"{path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as out:
            writer(out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ResultsError(f"{path}: cannot write ({_reason(e)})") from None
        raise


def save_png(fig, path):
    """Writes `fig` to a temporary PNG beside `path` and renames it, so `path` is never partial."""
    write_via_temporary(path, lambda out: fig.savefig(out, format="png", dpi=fig.dpi))


def run_main(main):
    """Runs main() → exit status; errors become one line on stderr and exit status 1.

    SCALESCOPE_POST_DEBUG=1 shows the traceback of an unexpected error."""
    prog = os.path.basename(sys.argv[0])
    try:
        status = main()
    except ResultsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        status = 1
    except BrokenPipeError:
        status = 1
    except Exception as e:  # never a traceback: one line naming the failure
        if os.environ.get("SCALESCOPE_POST_DEBUG"):
            raise
        print(f"{prog}: error: {type(e).__name__}: {_reason(e)}", file=sys.stderr)
        status = 1
    sys.exit(status or 0)
