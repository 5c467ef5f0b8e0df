#!/usr/bin/python3
"""The HTML report as a person sees it: headless Chromium (Debian's chromium and chromedriver,
driven by Selenium) opens the report of the quickstart run and of the shipped sweep
inputs/sweeps/llama3-8b-64-layouts.yaml, and this checks that

- the page loads nothing from the network and logs no console error;
- the headline figures on the page are summary.json's (sweep.json's counts for a sweep): each
  card carries the file's value verbatim (data-value) and its text reads back to that value to
  the printed precision;
- the sweep table sorts: clicking "iteration" orders the replayed rows by sweep.json's iteration
  times, ascending and then descending, and clicking "status" orders the rows by status;
- `scalescope compare` of the quickstart with a slow GPU against its baseline: its cards are the
  two summary.json's values and its "ranks that moved" the two results.h5's finish times;
- with --screenshots DIR, full-page screenshots go to DIR/report-run.png, DIR/report-sweep.png
  and DIR/compare.png (docs/img/ holds the committed ones).

Exit status 77 (a ctest skip) with a loud reason when Chromium, chromedriver or Selenium is
missing; scripts/setup.sh installs them.

    tests/post/report_test.py BIN REPO [--screenshots DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def skip(why):
    print(f"SKIP: report_test: {why}; scripts/setup.sh installs chromium, chromium-driver and "
          "python3-selenium", file=sys.stderr)
    sys.exit(SKIP)


def browser():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            skip(f"{path} is not installed")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip("Selenium (python3-selenium) is not installed")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # The flags that keep Chromium from reaching for the network on a closed machine (the
    # machine notes in the tool library), and a fresh profile.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--window-size=1240,900",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='report-test-chromium-')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def check_offline(html_text, name):
    """No resource the page would fetch: no <link>, no external script/img/iframe, no url()."""
    bad = re.findall(r"<(?:link|iframe|img|script)[^>]*\b(?:src|href)=[\"']?(?:https?:)?//",
                     html_text, re.I) + re.findall(r"url\(\s*[\"']?(?:https?:)?//", html_text)
    assert not bad, f"{name}: the page fetches from the network: {bad[:3]}"


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def number(text):
    """'190.12 ms' → (0.19012, 0.000005): the value and half a unit of its last printed digit."""
    m = re.match(r"\s*([-+]?[\d,]*\.?\d+)\s*(ms|µs|s|GiB|%)?", text)
    assert m, f"no number in {text!r}"
    digits, unit = m.group(1).replace(",", ""), m.group(2) or ""
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    scale = {"ms": 1e-3, "µs": 1e-6, "s": 1, "GiB": 2.0 ** 30, "%": 1e-2, "": 1}[unit]
    return float(digits) * scale, 0.5 * 10 ** -decimals * scale


def cards(driver):
    from selenium.webdriver.common.by import By
    out = {}
    for c in driver.find_elements(By.CSS_SELECTOR, "#headline .card"):
        out[c.get_attribute("data-key")] = (c.get_attribute("data-value"),
                                            c.find_element(By.CLASS_NAME, "v").text)
    return out


def screenshot(driver, path):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1240, min(int(height) + 40, 8000))
    driver.execute_script("window.scrollTo(0, 0)")
    assert driver.save_screenshot(path), f"cannot write {path}"
    print(f"screenshot {path}")


def check_run(driver, run_dir, report, shots):
    driver.get("file://" + report)
    errors = console_errors(driver)
    assert not errors, f"console errors on the run report: {errors}"
    s = json.load(open(os.path.join(run_dir, "summary.json")))
    shown = cards(driver)
    # The headline: summary.json's value, verbatim and as printed.
    for key, path in (("iteration_time_s", ("iteration_time_s",)),
                      ("tokens_per_s", ("tokens_per_s",)),
                      ("model_tflops_per_gpu", ("model_tflops_per_gpu",)),
                      ("mfu", ("mfu",)),
                      ("memory.peak_allocated_bytes", ("memory", "peak_allocated_bytes")),
                      ("memory.peak_reserved_bytes", ("memory", "peak_reserved_bytes")),
                      ("memory.peak_total_bytes", ("memory", "peak_total_bytes"))):
        want = s
        for p in path:
            want = want[p]
        assert key in shown, f"headline card {key} missing (cards: {sorted(shown)})"
        value, text = shown[key]
        assert float(value) == float(want), f"{key}: data-value {value} != summary.json {want}"
        if key == "memory.peak_total_bytes":
            assert text.startswith("fits" if s["memory"]["fits"] else "does not fit"), text
            text = text.split(":", 1)[1]
        got, tol = number(text)
        assert abs(got - want) <= tol * 1.0001, f"{key}: page shows {text!r}, summary.json {want}"
        print(f"run headline {key}: page {text!r} = summary.json {want}")
    body = driver.find_element("tag name", "body").text
    for needle in (f"rank {s['time_breakdown_rank']}, the last to finish",
                   f"rank {s['memory']['tightest_rank']} (pipeline stage "
                   f"{s['memory']['tightest_pp_stage']}), the tightest", "ui.perfetto.dev"):
        assert needle in body, f"run report lacks {needle!r}"
    lanes = driver.execute_script("return document.querySelectorAll('#gantt rect').length")
    assert lanes > 0, "the timeline has no ops"
    if shots:
        screenshot(driver, os.path.join(shots, "report-run.png"))


def column_values(driver, col):
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#sweep-table tbody tr'))"
        ".map(r => r.cells[arguments[0]].getAttribute('data-v') ?? r.cells[arguments[0]].textContent)",
        col)


def check_sweep(driver, sweep_dir, report, shots):
    from selenium.webdriver.common.by import By
    driver.set_window_size(1240, 900)
    driver.get("file://" + report)
    errors = console_errors(driver)
    assert not errors, f"console errors on the sweep report: {errors}"
    doc = json.load(open(os.path.join(sweep_dir, "sweep.json")))
    rows = doc["rows"]
    shown = cards(driver)
    want = {"configurations": len(rows),
            "ok": sum(r["status"] == "ok" for r in rows),
            "does_not_fit": sum(r["status"] == "does_not_fit" for r in rows),
            "invalid": sum(r["status"] == "invalid" for r in rows)}
    for key, n in want.items():
        assert int(shown[key][0]) == n and number(shown[key][1])[0] == n, \
            f"sweep headline {key}: page {shown[key]} != sweep.json {n}"
        print(f"sweep headline {key}: page {shown[key][1]!r} = sweep.json {n}")
    headers = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "#sweep-table th")]
    it_col, status_col = headers.index("iteration"), headers.index("status")
    times = sorted(r["iteration_time_s"] for r in rows if r["replayed"])
    # Refused rows are apart, in their own table below: never sorted among the figures.
    n_unreplayed = sum(not r["replayed"] and r["status"] != "invalid" for r in rows)
    n_refused = sum(r["status"] == "invalid" for r in rows)
    refused_rows = driver.execute_script(
        "return document.querySelectorAll('#refused-table tbody tr').length")
    main_statuses = column_values(driver, status_col)
    assert refused_rows == n_refused and "invalid" not in main_statuses, \
        f"refused rows: {refused_rows} apart of {n_refused}, main table {set(main_statuses)}"
    header = driver.find_elements(By.CSS_SELECTOR, "#sweep-table th")[it_col]
    header.click()
    got = column_values(driver, it_col)
    assert [float(v) for v in got[:len(times)]] == times and got[len(times):] == [""] * n_unreplayed, \
        "clicking 'iteration' did not sort the rows by sweep.json's iteration times"
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    got = column_values(driver, it_col)
    assert got[:n_unreplayed] == [""] * n_unreplayed and \
        [float(v) for v in got[n_unreplayed:]] == times[::-1], "second click: not descending"
    driver.find_elements(By.CSS_SELECTOR, "#sweep-table th")[status_col].click()
    statuses = column_values(driver, status_col)
    assert statuses == sorted(statuses, key=lambda v: v.lower()), "'status' did not sort"
    print(f"sweep table sorts: {len(rows)} rows by iteration (both ways) and by status")
    driver.find_elements(By.CSS_SELECTOR, "#sweep-table th")[0].click()  # back to rank order
    circles = driver.execute_script("return document.querySelectorAll('#pareto circle').length")
    assert circles == len(times), f"Pareto plot has {circles} points, {len(times)} replayed"
    assert not console_errors(driver), "console errors after sorting"
    if shots:
        screenshot(driver, os.path.join(shots, "report-sweep.png"))


def check_timeline_at_scale(driver, run_dir, report):
    """The GPT-3 1,024-GPU run (traced ranks 0 and 1016): every traced rank has its lanes in the
    timeline, every colour drawn there is in its legend, and the per-rank heatmaps hold a cell
    per rank."""
    driver.set_window_size(1240, 900)
    driver.get("file://" + report)
    assert not console_errors(driver), "console errors on the 1,024-GPU report"
    import h5py
    with h5py.File(os.path.join(run_dir, "results.h5"), "r") as f:
        traced = sorted(int(k) for k in f["timeline"].keys() if k.isdigit())
        world = len(f["ranks/finish_ns"])
    lanes = driver.execute_script(
        "return Array.from(document.querySelectorAll('#gantt text.lane'))"
        ".map(t => Number(t.getAttribute('data-rank')))")
    assert sorted(set(lanes)) == traced, f"lanes for ranks {sorted(set(lanes))}, traced {traced}"
    drawn = set(driver.execute_script(
        "return Array.from(document.querySelectorAll('#gantt rect')).map(r => r.getAttribute('fill'))"))
    keys = set(driver.execute_script(
        "return Array.from(document.querySelectorAll('#gantt')).map(g => g.closest('div.scroll')"
        ".previousElementSibling).flatMap(l => Array.from(l.querySelectorAll('i')))"
        ".map(i => i.style.background)"))
    # The legend's colours come back as rgb(…): compare as such.
    def rgb(h):
        return f"rgb({int(h[1:3], 16)}, {int(h[3:5], 16)}, {int(h[5:7], 16)})"
    assert drawn and {rgb(c) for c in drawn} <= keys, f"colours drawn {drawn} not in legend {keys}"
    for heat in ("heat-finish", "heat-exposed"):
        cells = driver.execute_script(f"return document.querySelectorAll('#{heat} rect').length")
        assert cells == world, f"{heat}: {cells} cells for {world} ranks"
    print(f"1,024-GPU report: lanes for traced ranks {traced}, {len(drawn)} colours all in the "
          f"legend, heatmaps of {world} cells")


def check_compare(driver, whatif_dir, page, shots):
    """`scalescope compare` of a what-if run against its baseline: every card is one run's
    summary.json value, verbatim and as printed; the ranks table's changes are the two
    results.h5 files' finish times subtracted here."""
    import h5py
    driver.set_window_size(1240, 900)
    driver.get("file://" + page)
    errors = console_errors(driver)
    assert not errors, f"console errors on the comparison: {errors}"
    files = {"baseline": os.path.join(whatif_dir, "baseline"), "what-if": whatif_dir}
    summaries = {k: json.load(open(os.path.join(d, "summary.json"))) for k, d in files.items()}
    shown = cards(driver)
    checked = 0
    for label, s in summaries.items():
        for key in ("iteration_time_s", "tokens_per_s", "mfu", "memory.peak_total_bytes"):
            want = s
            for p in key.split("."):
                want = want[p]
            value, text = shown[f"{label}:{key}"]
            assert float(value) == float(want), f"{label} {key}: {value} != summary.json {want}"
            got, tol = number(text)
            assert abs(got - want) <= tol * 1.0001, f"{label} {key}: page {text!r}, file {want}"
            checked += 1
    finish = {}
    for label, d in files.items():
        with h5py.File(os.path.join(d, "results.h5"), "r") as f:
            finish[label] = f["ranks/finish_ns"][:].astype("int64")
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#ranks-what-if tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))")
    assert rows, "no ranks moved"
    for row in rows:
        rank, change = int(row[0]), float(row[3])
        want = (finish["what-if"][rank] - finish["baseline"][rank]) * 1e-6
        assert abs(change - want) <= 0.0005 + 1e-9, f"rank {rank}: page {change} ms, files {want}"
    assert abs(float(rows[0][3])) == max(abs(float(r[3])) for r in rows), "not ordered by change"
    body = driver.find_element("tag name", "body").text
    assert "slow_gpu" in body and "Ops whose time moved most" in body, "what-if or ops missing"
    print(f"compare: {checked} cards = the two summary.json, {len(rows)} ranks' changes = the "
          "two results.h5")
    if shots:
        screenshot(driver, os.path.join(shots, "compare.png"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("repo")
    p.add_argument("--screenshots",
                   help="directory for report-run.png, report-sweep.png and compare.png")
    args = p.parse_args()
    driver = browser()
    tmp = tempfile.mkdtemp(prefix="report-test-")
    try:
        run_dir, sweep_dir = os.path.join(tmp, "quickstart"), os.path.join(tmp, "sweep")
        whatif_dir = os.path.join(tmp, "whatif")
        subprocess.run([args.bin, "run", f"{args.repo}/inputs/experiments/quickstart.yaml",
                        "-o", whatif_dir, "--quiet", "--whatif",
                        "slow_gpu: {ranks: [3], factor: 1.2}"], check=True)
        compare_page = os.path.join(tmp, "compare.html")
        subprocess.run([args.bin, "compare", whatif_dir, "-o", compare_page], check=True,
                       stdout=subprocess.DEVNULL)
        check_offline(open(compare_page, encoding="utf-8").read(), compare_page)
        subprocess.run([args.bin, "run", f"{args.repo}/inputs/experiments/quickstart.yaml",
                        "-o", run_dir, "--quiet"], check=True)
        subprocess.run([args.bin, "sweep", f"{args.repo}/inputs/sweeps/llama3-8b-64-layouts.yaml",
                        "-o", sweep_dir, "--quiet"], check=True, stdout=subprocess.DEVNULL)
        reports = {}
        for name, d in (("run", run_dir), ("sweep", sweep_dir)):
            out = os.path.join(tmp, f"{name}.html")
            subprocess.run([sys.executable, f"{args.repo}/scripts/post/report.py", d, "-o", out],
                           check=True)
            check_offline(open(out, encoding="utf-8").read(), out)
            reports[name] = out
        if args.screenshots:
            os.makedirs(args.screenshots, exist_ok=True)
        check_run(driver, run_dir, reports["run"], args.screenshots)
        check_sweep(driver, sweep_dir, reports["sweep"], args.screenshots)
        check_compare(driver, whatif_dir, compare_page, args.screenshots)
        big = os.path.join(tmp, "gpt3-1024")
        subprocess.run([args.bin, "run", f"{args.repo}/inputs/experiments/gpt3-175b-1024.yaml",
                        "-o", big, "--quiet"], check=True)
        subprocess.run([sys.executable, f"{args.repo}/scripts/post/report.py", big, "-o",
                        big + ".html"], check=True, stdout=subprocess.DEVNULL)
        check_timeline_at_scale(driver, big, big + ".html")
    finally:
        driver.quit()
        shutil.rmtree(tmp, ignore_errors=True)
    print("report_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
