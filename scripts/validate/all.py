#!/usr/bin/python3
"""Every public validation set in one run: a table per set with all its rows, the median signed
and absolute error over all of them, subsets as additional lines, and the rows a model change
was developed against apart from the rows never used. One summary line per set at the end;
validation.json holds every row. Called by scripts/validate/all.sh (see there for usage).

Sets (docs/validation.md "All sets"):
  vtrain      109 Megatron-DeepSpeed iteration times on 64-512 A100 (../shared/validation);
              every row predicted by the leave-one-model-out fold that did not see its model
              size; the in-sample fit (the dgx-a100 preset) as an additional line
  memory      9 Megatron-LM functional tests' peak allocated memory, last stage (inputs/validation)
  h100        40 H100 iteration times: Megatron functional tests, NeMo, Megatron-Bridge, the
              MoE Model Zoo (inputs/validation); subsets dense / MoE / long-sequence and by
              software vintage
  blackwell   24 Megatron-Bridge 26.04.01 iteration times on DGX B200 / B300 and GB200 / GB300
              NVL72 (inputs/validation/blackwell_megatron_bridge.csv); subsets by system
  fsdp        FSDP layouts (issue 37): NeMo AutoModel's H100 iteration times (FSDP2 with PP
              and EP), the Megatron-FSDP rows of h100 and blackwell, ratios of torchtitan's
              Llama 3.1 405B runs (FSDP × TP × PP × CP) and their peak memory
  nccl        39 NCCL all-reduce times on Azure ND A100 v4 through the emulation
  torchtitan  9 ratios (what fp8 and async TP buy) of torchtitan's H100 jobs, captured model
  recipe      13 NVIDIA-tuned dense H100 recipes: the predicted gain of the best layout a sweep
              finds over the recipe's own (0 when the recipe ranks first)
--quick keeps every set's rows cheap to run (listed in QUICK below) and leaves out torchtitan
and recipe; its figures are pinned separately from the full run's.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import h100  # noqa: E402
import megatron_memory  # noqa: E402
import nccl_azure  # noqa: E402
import vtrain_rows as vr  # noqa: E402

VTRAIN_CSV = os.path.join(ROOT, "..", "shared", "validation", "vtrain_a100_multinode.csv")
CALIBRATION = os.path.join(HERE, "calibration-a100.json")

# Rows a model change was developed against (its effect looked at on these rows before it was
# committed), per docs/validation-public.md and docs/validation.md; every other row was never
# used to develop the model (collected and reported only).
DEVELOPED = {
    # docs/validation.md: the three kernel constants are fitted on all 109 rows (in-sample);
    # the LOMO figure predicts each row from a fold that did not see its model size.
    "vtrain": "all",
    # validation-public §1: the loss-side memory, learned position embeddings and the cuBLAS
    # workspaces were added after the first run on these 9 rows.
    "memory": "all",
    # validation-public §2: the 12 rows of h100_megatron_throughput.csv were the rows fp8, CP's
    # ring steps and the overlap settings were developed against; §6: the Model Zoo ablation
    # pair and the report's row for the EP overlap and the host issue, Megatron-Bridge's
    # Qwen3-235B row for the EP overlap; §5/§6: the NeMo 24.03.01 long-sequence sweep for the
    # flash2 backend (which the rows do not use); issue 23: all Model Zoo rows for the all-to-all
    # dispatcher's sort passes (validation-public §8).
    # Issue 36: the NeMo 24.07 rows' stack (flash-attn) and launcher inputs were applied with
    # the issue's account of their effect in view; the four 64 M-parameter functional tests fit
    # training.host_iteration_ms (scripts/validate/fit_host_iteration.py); the Qwen3-235B
    # Megatron-Bridge row's dispatcher was corrected after looking at it. Issue 36 (2026-12-05):
    # the Qwen3-30B row's breakdown was read while choosing the flex dispatcher's link fractions
    # (their values come from HybridEP's own tables, not from rows).
    "h100": {"file:h100_megatron_throughput.csv", "file:h100_moe_modelzoo.csv",
             "Qwen3-235B-A22B-MB", "Qwen3-30B-A3B-MB", "LLAMA2-7B-4k", "LLAMA2-7B-8k",
             "LLAMA2-7B-16k", "LLAMA2-7B-32k", "LLAMA2-7B-64k", "LLAMA2-7B-128k",
             "LLAMA2-7B-256k", "LLAMA2-7B-512k", "LLAMA2-7B-1024k",
             "GPT3-5B", "GPT3-20B", "LLAMA2-13B", "Nemotron-4-340B"},
    # issue 24: the azure-nd-a100-v4 preset's nic_bus_efficiency is fitted on the 16- and 64-GPU
    # rows (scripts/validate/nccl.sh --fit); the 32- and 128-GPU rows are held out, and the
    # single-node rows use the NVLink efficiency from NVIDIA's DGX A100 figure, not these rows.
    "nccl": set(),  # per row in set_nccl: the FIT_RANKS rows
    # docs/validation.md: nothing was fitted to torchtitan's numbers; the fp8 and async-TP
    # models were written from their sources and compared afterwards.
    "torchtitan": set(),
    # issue 36: the Blackwell rows were first run after every constant they use was chosen from
    # its source; nothing was fitted to them (docs/validation.md "Blackwell"). 2026-12-05: the
    # two DGX-B200 MoE rows' breakdowns were read while choosing the flex dispatcher's link
    # fractions (HybridEP's tables; not fitted to rows).
    # The two GB200 NVFP4 rows decided against scaling NVFP4's gain by the FP4 / FP8 peak
    # ratio (docs/cost-model.md "Blackwell"); their ids are shared with the MXFP8 rows of the
    # same model and system, which are labelled with them.
    "blackwell": {"Qwen3-30B-A3B-MB DGX-B200", "Qwen3-235B-A22B-MB DGX-B200",
                  "LLAMA3-70B-MB GB200-NVL72", "LLAMA3.1-405B-MB GB200-NVL72"},
    # validation-public §7: reported only (the deep-interleaving finding led to issue 23's
    # schedule fix, which comes from Megatron's source, not from these rows).
    "recipe": set(),
    # issue 37: the FSDP layouts were written from torchtitan's, PyTorch's and AutoModel's code
    # and the rows run afterwards; nothing was fitted to them. The three AutoModel rows with PP
    # were refused at first; FSDP2's per-micro-batch behaviour under PP and the
    # gradient-accumulation runs of the schedule were then added (from AutoModel's code) with
    # those rows in view.
    "fsdp": {"DeepSeek-V3-AM-1024", "DeepSeek-V3-AM-256", "Kimi-K2-AM"},
}

# --quick: rows cheap enough for the 3-minute budget on 2 cores (vTrain: every row, LOMO only,
# no in-sample pass).
QUICK = {
    "h100_max_gpus": 256,            # rows on ≤ 256 GPUs (drops the 512/1,024-GPU rows)
    "nccl_ranks": {2, 16, 128},      # three communicator sizes of the seven
}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def stats(errs):
    return {"rows": len(errs), "median_signed": med(errs),
            "median_abs": med([abs(e) for e in errs]),
            "min": min(errs) if errs else float("nan"), "max": max(errs) if errs else float("nan")}


def fmt_stats(label, s):
    if not s["rows"]:
        return f"  {label:<44} (no rows)"
    return (f"  {label:<44} rows {s['rows']:>3}  median {100 * s['median_signed']:+6.1f} %  "
            f"median |err| {100 * s['median_abs']:5.1f} %  range {100 * s['min']:+.1f} … "
            f"{100 * s['max']:+.1f} %")


def developed(set_name, key, source_file=""):
    d = DEVELOPED[set_name]
    if d == "all":
        return True
    return key in d or f"file:{source_file}" in d


# ---- the sets ----------------------------------------------------------------------------------

def set_vtrain(args):
    rows = vr.load_rows(VTRAIN_CSV)
    cal = json.load(open(CALIBRATION))
    meas = vr.measured(rows)
    models = [vr.model_of(r) for r in rows]
    lomo = vr.run_rows(args.scalescope, rows,
                       [{**vr.calibration_sets(cal["lomo"][m]), **args.sets} for m in models],
                       args.jobs)
    out = []
    for i, r in enumerate(rows):
        out.append({"id": f"{r['params_b']}B gpus {r['gpus']} tp {r['tp']} pp {r['pp']} "
                          f"dp {r['dp']} mb {r['micro_batch']}",
                    "measured": meas[i], "predicted": lomo[i], "error": lomo[i] / meas[i] - 1,
                    "developed": True, "tags": [f"{r['params_b']}B"]})
    extra = {}
    if not args.quick:
        ins = vr.run_rows(args.scalescope, rows,
                          {**vr.calibration_sets(cal["in_sample"]), **args.sets}, args.jobs)
        for d, p, m in zip(out, ins, meas):
            d["in_sample"] = p
        extra["in-sample fit (all 109 rows fitted)"] = stats([p / m - 1 for p, m in zip(ins, meas)])
    return {"metric": "iteration time, leave-one-model-out prediction / measured - 1 (ms)",
            "rows": out, "subsets": sorted({f"{m}B" for m in models}, key=lambda s: float(s[:-1])),
            "extra": extra}


def set_memory(args):
    rows = list(csv.DictReader(open(os.path.join(ROOT, "inputs", "validation",
                                                 "megatron_functional_memory.csv"))))
    tmp = tempfile.mkdtemp(prefix="all_memory_")
    results, skipped = megatron_memory.evaluate(args.scalescope, rows, tmp)
    out = [{"id": d["case"], "measured": d["measured_gib"], "predicted": d["last_gib"],
            "error": d["error"], "developed": developed("memory", d["case"]), "tags": []}
           for d in results]
    return {"metric": "peak allocated memory at the last stage, predicted / measured - 1 (GiB)",
            "rows": out, "skipped": skipped, "subsets": [], "extra": {}}


# The H100 rows by software vintage (the `vintage` column of inputs/validation/h100_*.csv): the
# sets differ in what they measure (docs/validation.md "H100 by vintage").
H100_VINTAGES = ["NeMo 2024", "Megatron-Bridge 2025-26", "Model Zoo", "functional tests"]


def set_h100(args):
    rows = []
    for path in h100.DEFAULT_CSVS:
        for r in csv.DictReader(open(path)):
            r["_file"] = os.path.basename(path)
            if args.quick and int(r["gpus"]) > QUICK["h100_max_gpus"]:
                continue
            rows.append(r)
    tmp = tempfile.mkdtemp(prefix="all_h100_")
    results, skipped = h100.evaluate(args.scalescope, rows, tmp, timeout=300,
                                     sets=[f"{k}={v}" for k, v in args.sets.items()],
                                     jobs=args.jobs)
    files = {r["model"] + "|" + r["gpus"]: r["_file"] for r in rows}
    out = []
    for d in results:
        tags = ["MoE" if d["moe"] else ("long-sequence" if d["long_sequence"] else "dense")]
        if d["vintage"]:
            tags.append(d["vintage"])
        f = files[d["model"] + "|" + str(d["gpus"])]
        out.append({"id": f"{d['model']} ({d['gpus']} GPUs)", "measured": d["measured_s"],
                    "predicted": d["predicted_s"], "error": d["error"],
                    "developed": developed("h100", d["model"], f), "tags": tags,
                    "fits": d["fits"]})
    return {"metric": "iteration time, predicted / measured - 1 (s)", "rows": out,
            "skipped": skipped, "subsets": ["dense", "MoE", "long-sequence"] + H100_VINTAGES,
            "summary_subsets": H100_VINTAGES, "extra": {}}


BLACKWELL_CSV = os.path.join(ROOT, "inputs", "validation", "blackwell_megatron_bridge.csv")
BLACKWELL_SYSTEMS = ["DGX-B200", "DGX-B300", "GB200-NVL72", "GB300-NVL72"]


def set_blackwell(args):
    """Megatron-Bridge 26.04.01's published Blackwell rows (docs/validation.md "Blackwell")."""
    rows = list(csv.DictReader(open(BLACKWELL_CSV)))
    tmp = tempfile.mkdtemp(prefix="all_blackwell_")
    results, skipped = h100.evaluate(args.scalescope, rows, tmp, timeout=300,
                                     sets=[f"{k}={v}" for k, v in args.sets.items()],
                                     jobs=args.jobs)
    out = []
    for d in results:
        system = d["vintage"].split()[-1]
        out.append({"id": f"{d['model']} ({d['gpus']} GPUs)", "measured": d["measured_s"],
                    "predicted": d["predicted_s"], "error": d["error"],
                    "developed": developed("blackwell", d["model"]),
                    "tags": [system, "MoE" if d["moe"] else "dense"], "fits": d["fits"]})
    return {"metric": "iteration time, predicted / measured - 1 (s)", "rows": out,
            "skipped": skipped, "subsets": BLACKWELL_SYSTEMS + ["dense", "MoE"],
            "summary_subsets": BLACKWELL_SYSTEMS, "extra": {}}


FSDP_CSVS = [os.path.join(ROOT, "inputs", "validation", name)
             for name in ("fsdp_layouts_automodel.csv", "h100_nemo_throughput.csv",
                          "blackwell_megatron_bridge.csv")]


def set_fsdp(args):
    """The layouts PyTorch-native and FSDP runs use (issue 37): NeMo AutoModel's H100 rows
    (FSDP2 with PP and EP), the Megatron-FSDP rows of the h100 and blackwell sets, and the
    ratios of torchtitan's Llama 3.1 405B runs (FSDP × TP × PP, × CP); docs/validation.md
    "FSDP layouts"."""
    import torchtitan_405b
    rows = []
    for path in FSDP_CSVS:
        for r in csv.DictReader(open(path)):
            extra = r.get("extra") or ""
            if path.endswith("automodel.csv") or "parallel.zero_stage=3" in extra:
                rows.append(r)
    tmp = tempfile.mkdtemp(prefix="all_fsdp_")
    results, skipped = h100.evaluate(args.scalescope, rows, tmp, timeout=300,
                                     sets=[f"{k}={v}" for k, v in args.sets.items()],
                                     jobs=args.jobs)
    not_expressible = [f"{r['model']} ({r['gpus']} GPUs): {r['skip']}" for r in rows
                       if r.get("skip")]
    errors = [f"{m} ({g} GPUs): {why}" for m, g, why in skipped
              if not any(r["model"] == m and r.get("skip") for r in rows)]
    out = []
    for d, r in zip(results, [r for r in rows if not r.get("skip")]):
        source = "AutoModel" if "Automodel" in r["source"] else "Megatron-FSDP"
        extra = r.get("extra") or ""
        tags = [source]
        if int(r["pp"]) > 1:
            tags.append("with PP")
        if d["moe"]:
            tags.append("with EP")
        out.append({"id": f"{d['model']} ({d['gpus']} GPUs)", "measured": d["measured_s"],
                    "predicted": d["predicted_s"], "error": d["error"],
                    "developed": developed("fsdp", d["model"]), "tags": tags,
                    "fits": d["fits"], "extra_keys": extra})
    ratios, memory = torchtitan_405b.evaluate(
        args.scalescope, [f"{k}={v}" for k, v in args.sets.items()])
    for r in ratios:
        out.append({"id": r["id"], "measured": r["measured"], "predicted": r["predicted"],
                    "error": r["error"], "developed": developed("fsdp", r["id"]),
                    "tags": ["torchtitan ratio", "with PP"]})
    return {"metric": "iteration time (AutoModel, Megatron-FSDP) or a ratio of tokens/s "
                      "(torchtitan 405B), predicted / measured - 1",
            "rows": out, "skipped": errors, "not_expressible": not_expressible,
            "subsets": ["AutoModel", "Megatron-FSDP", "torchtitan ratio", "with PP", "with EP"],
            "summary_subsets": ["AutoModel", "Megatron-FSDP", "torchtitan ratio"],
            "extra": {"torchtitan 405B peak reserved memory (GiB)":
                      stats([m["error"] for m in memory])},
            "memory_rows": memory}


def set_nccl(args):
    rows = nccl_azure.load_rows(QUICK["nccl_ranks"] if args.quick else None)
    # The flow model on the system's own preset, as scripts/validate/nccl.sh runs it.
    results = nccl_azure.evaluate(args.scalescope, rows, args.jobs, "azure-nd-a100-v4",
                                  ["network.model=flow", "run.p2p=rendezvous"])
    out = [{"id": f"{d['ranks']} ranks, {d['bytes']} B", "measured": d["measured_us"],
            "predicted": d["predicted_us"], "error": d["error"],
            "developed": d["ranks"] in nccl_azure.FIT_RANKS,
            "tags": [">= 16 MiB" if d["bytes"] >= 16 << 20 else "< 16 MiB"]} for d in results]
    return {"metric": "all-reduce time, predicted / measured - 1 (us)", "rows": out,
            "subsets": [">= 16 MiB", "< 16 MiB"], "extra": {}}


def set_torchtitan(args):
    tmp = tempfile.mkdtemp(prefix="all_torchtitan_")
    path = os.path.join(tmp, "torchtitan.json")
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torchtitan.py"),
                        os.path.abspath(args.scalescope),
                        "--json", path]
                       + [a for k, v in args.sets.items() for a in ("--set", f"{k}={v}")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"torchtitan.py failed: {(p.stderr or p.stdout).strip()}")
    t = json.load(open(path))
    out = [{"id": f"{d['job']}: {d['ratio']}", "measured": d["measured"],
            "predicted": d["predicted"], "error": d["predicted"] / d["measured"] - 1,
            "developed": False, "tags": []} for d in t["ratios"]]
    mem = [d["predicted_gib"] / d["measured_gib"] - 1 for d in t["memory"]]
    return {"metric": "ratio of tokens/s (fp8 / bf16, async TP / TP), predicted / measured - 1",
            "rows": out, "subsets": [],
            "extra": {"peak memory of the jobs torchtitan reports (GiB)": stats(mem)},
            "memory_rows": t["memory"]}


def set_recipe(args):
    tmp = tempfile.mkdtemp(prefix="all_recipe_")
    path = os.path.join(tmp, "recipe.json")
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "recipe_rank.py"),
                        "--scalescope", args.scalescope, "--json", path, "--keep", tmp],
                       capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(path):
        raise SystemExit(f"recipe_rank.py failed: {(p.stderr or p.stdout).strip()}")
    out = [{"id": f"{d['model']} ({d['gpus']} GPUs) recipe {d['recipe']} rank {d['rank']}/"
                  f"{d['of']}, best {d['best']}", "measured": d["recipe_s"],
            "predicted": d["best_s"], "error": d["gain"], "developed": False, "tags": []}
           for d in json.load(open(path))]
    return {"metric": "predicted gain of the best layout over the tuned recipe's (0 = recipe "
                      "ranked first); 'measured' = recipe's predicted s, 'predicted' = best's",
            "rows": out, "subsets": [], "extra": {}}


SETS = [("vtrain", set_vtrain), ("memory", set_memory), ("h100", set_h100),
        ("blackwell", set_blackwell), ("fsdp", set_fsdp), ("nccl", set_nccl),
        ("torchtitan", set_torchtitan), ("recipe", set_recipe)]
QUICK_SETS = {"vtrain", "memory", "h100", "nccl"}


# ---- reporting and pins --------------------------------------------------------------------

def summarize(res):
    errs = [d["error"] for d in res["rows"]]
    res["all"] = stats(errs)
    res["subset_stats"] = {t: stats([d["error"] for d in res["rows"] if t in d["tags"]])
                           for t in res["subsets"]}
    res["developed_stats"] = stats([d["error"] for d in res["rows"] if d["developed"]])
    res["never_used_stats"] = stats([d["error"] for d in res["rows"] if not d["developed"]])


def print_set(name, res):
    print(f"\n## {name}: {res['metric']}")
    print(f"  {'row':<62} {'measured':>10} {'predicted':>10} {'error':>8}  use")
    for d in res["rows"]:
        print(f"  {d['id'][:62]:<62} {d['measured']:10.4g} {d['predicted']:10.4g} "
              f"{100 * d['error']:+7.1f}%  {'developed' if d['developed'] else 'never used'}")
    for why in res.get("skipped", []):
        print(f"  SKIPPED {why}")
    for why in res.get("not_expressible", []):
        print(f"  NOT EXPRESSIBLE {why}")
    for m in res.get("memory_rows", []):
        label = f"{m['job']} {m.get('run', '')}".strip()
        print(f"  peak memory, GiB: {label[:44]:<44} {m['measured_gib']:10.4g} "
              f"{m['predicted_gib']:10.4g} {100 * (m['predicted_gib'] / m['measured_gib'] - 1):+7.1f}%")
    print(fmt_stats("ALL ROWS", res["all"]))
    for t, s in res["subset_stats"].items():
        print(fmt_stats(f"subset {t}", s))
    print(fmt_stats("rows a model change was developed against", res["developed_stats"]))
    print(fmt_stats("rows never used", res["never_used_stats"]))
    for label, s in res["extra"].items():
        print(fmt_stats(label, s))


def read_pins(path):
    """{(set, mode): median |err| in %} from the table after '<!-- accuracy-pins -->'."""
    text = open(path).read()
    if "<!-- accuracy-pins -->" not in text:
        return {}
    pins = {}
    for line in text.split("<!-- accuracy-pins -->", 1)[1].strip().splitlines():
        if not line.startswith("|"):
            break  # the table ends
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 5 and cells[0] != "set" and not cells[0].startswith("-"):
            pins[(cells[0], cells[1])] = float(cells[4].rstrip(" %"))
    return pins


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--quick", action="store_true", help="cheap rows only (about 3 minutes)")
    ap.add_argument("--only", help="comma-separated set names")
    ap.add_argument("--jobs", type=int, default=2, help="scalescope runs at a time")
    ap.add_argument("--json", default="validation.json", help="write every row here")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="scalescope --set for every vtrain, h100 and torchtitan row (what-if "
                         "over the sets)")
    ap.add_argument("--check", metavar="DOC",
                    help="exit 1 if a set's median |err| exceeds its pin in DOC by > 1 point")
    args = ap.parse_args()
    args.scalescope = os.path.abspath(args.scalescope)
    if not os.access(args.scalescope, os.X_OK):
        ap.error(f"--scalescope {args.scalescope}: not an executable (build it: scripts/build.sh)")
    args.sets = dict(kv.split("=", 1) for kv in args.set)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {name for name, _ in SETS}
    if unknown:
        ap.error(f"--only: unknown set(s) {', '.join(sorted(unknown))}; the sets are "
                 f"{', '.join(name for name, _ in SETS)}")
    mode = "quick" if args.quick else "full"
    results, failed = {}, {}
    for name, fn in SETS:
        if (only and name not in only) or (args.quick and name not in QUICK_SETS):
            continue
        t = time.time()
        try:
            res = fn(args)
        except (SystemExit, RuntimeError, OSError) as e:
            # One set's failure (a missing ../shared file, no PyTorch for torchtitan) is
            # reported and the other sets still run; the exit status says it.
            failed[name] = str(e) or type(e).__name__
            print(f"\n## {name}: FAILED: {failed[name]}", file=sys.stderr)
            continue
        res["seconds"] = round(time.time() - t, 1)
        if not res["rows"]:
            failed[name] = f"no row could be run ({len(res.get('skipped', []))} skipped)"
            print(f"\n## {name}: FAILED: {failed[name]}", file=sys.stderr)
            for why in res.get("skipped", []):
                print(f"  SKIPPED {why}", file=sys.stderr)
            continue
        summarize(res)
        print_set(name, res)
        results[name] = res
        sys.stdout.flush()
    print(f"\n# summary ({mode}; error = predicted / measured - 1 over all rows of each set)")
    for name, res in results.items():
        a = res["all"]
        print(f"{name:<11} {mode:<5} rows {a['rows']:>3}  median {100 * a['median_signed']:+6.1f} %"
              f"  median |err| {100 * a['median_abs']:5.1f} %  (developed {res['developed_stats']['rows']},"
              f" never used {res['never_used_stats']['rows']}; {res['seconds']:.0f} s)")
        for t in res.get("summary_subsets", []):
            v = res["subset_stats"][t]
            if v["rows"]:
                print(f"{'':<11} {'':<5} {t:<24} rows {v['rows']:>3}  median "
                      f"{100 * v['median_signed']:+6.1f} %  median |err| {100 * v['median_abs']:5.1f} %")
    for name, why in failed.items():
        print(f"{name:<11} {mode:<5} FAILED: {why}")
    tmp = args.json + ".tmp"
    json.dump({"mode": mode, "sets": results, "failed": failed}, open(tmp, "w"), indent=1)
    os.replace(tmp, args.json)
    if args.check:
        pins = read_pins(args.check)
        bad = []
        for name, res in results.items():
            pin = pins.get((name, mode))
            if pin is None:
                bad.append(f"{name}: no {mode} pin in {args.check}")
                continue
            got = 100 * res["all"]["median_abs"]
            skipped = len(res.get("skipped", []))
            if skipped:
                bad.append(f"{name}: {skipped} row(s) skipped")
            if not got <= pin + 1.0:  # also catches NaN
                bad.append(f"{name}: median |err| {got:.1f} % > pinned {pin:.1f} % + 1 point")
        if bad:
            print("accuracy check FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"accuracy check passed against {args.check} ({len(results)} sets)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
