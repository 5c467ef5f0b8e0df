#!/usr/bin/python3
"""The README's accuracy figures are the pins of docs/validation.md: between the README's
<!-- accuracy-figures --> markers, each "SET SIGNED / ABS %" must be the full-mode row of that
set in the pin table (<!-- accuracy-pins -->), and every full-mode set must be quoted.
Usage: readme_figures.py REPO"""
import re
import sys

repo = sys.argv[1]
readme = open(f"{repo}/README.md", encoding="utf-8").read()
validation = open(f"{repo}/docs/validation.md", encoding="utf-8").read()
m = re.search(r"<!-- accuracy-figures -->(.*?)<!-- /accuracy-figures -->", readme, re.S)
if not m:
    sys.exit("README.md: no <!-- accuracy-figures --> … <!-- /accuracy-figures --> block")
quoted = {s: (float(a.replace("−", "-")), float(b)) for s, a, b in
          re.findall(r"(\w+) ([+−-]?\d+\.\d) / (\d+\.\d) %", m.group(1))}
table = validation.split("<!-- accuracy-pins -->", 1)[1]
pins = {s: (float(a), float(b)) for s, a, b in
        re.findall(r"^\| (\w+) \| full \| \d+ \| ([+-]?\d+\.\d) % \| (\d+\.\d) % \|", table, re.M)}
bad = [f"{s}: README {quoted.get(s)}, pinned {p}" for s, p in pins.items() if quoted.get(s) != p]
bad += [f"{s}: quoted in the README but not pinned" for s in quoted if s not in pins]
if bad or not pins:
    sys.exit("README.md's accuracy figures are not docs/validation.md's pins: " +
             ("; ".join(bad) or "no full-mode pins found"))
print(f"ok: the README quotes the {len(pins)} full-mode pins of docs/validation.md")
