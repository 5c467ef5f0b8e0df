"""Runs vTrain measurement rows through scalescope (shared by vtrain.py and fit_calibration.py).

A row becomes `scalescope run vtrain-base.yaml` with the row's model shape and parallel layout as
--set overrides, plus any extra overrides; at most `jobs` runs at a time, each under `nice`.
"""
import concurrent.futures
import csv
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "vtrain-base.yaml")


def load_rows(path):
    return list(csv.DictReader(open(path)))


def row_sets(r):
    """The --set overrides that describe one measured row."""
    return {
        "model.num_layers": r["layers"], "model.hidden_size": r["hidden"],
        "model.num_attention_heads": r["heads"], "model.seq_length": r["seq_len"],
        "parallel.tensor_model_parallel_size": r["tp"],
        "parallel.pipeline_model_parallel_size": r["pp"],
        "parallel.data_parallel_size": r["dp"], "cluster.num_gpus": r["gpus"],
        "training.micro_batch_size": r["micro_batch"],
        "training.global_batch_size": r["global_batch"],
    }


def run_row(scalescope, row, extra, base=BASE):
    """Simulated iteration time of one row in ms; `extra` is a dict of further overrides."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nice", "-n", "15", scalescope, "run", base, "-o", tmp, "--quiet"]
        for k, v in {**row_sets(row), **extra}.items():
            cmd += ["--set", f"{k}={v}"]
        # A private TMPDIR: Open MPI singletons started at the same moment race on one session
        # directory under /tmp otherwise.
        env = {**os.environ, "TMPDIR": tmp}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"scalescope failed on {row}: {p.stderr.strip()}")
        return json.load(open(os.path.join(tmp, "summary.json")))["iteration_time_s"] * 1e3


def run_rows(scalescope, rows, extra, jobs=2, base=BASE):
    """Simulated ms of every row. `extra` is one dict for all rows or a list, one per row."""
    extras = extra if isinstance(extra, list) else [extra] * len(rows)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(lambda a: run_row(scalescope, a[0], a[1], base), zip(rows, extras)))


def calibration_sets(p):
    """A kernel calibration ({kernel_overhead_us, gemm_efficiency, hbm_efficiency}) as --sets."""
    return {f"cluster.{k}": v for k, v in p.items()}


def measured(rows):
    return [float(r["measured_iter_ms"]) for r in rows]


def model_of(r):
    return r["params_b"]
