#!/usr/bin/env python3
"""Checks `moewb capture` against the PyTorch profiler on the GPU machine (issue 5): runs a PyTorch
script (default anchors/moe_layer.py) once under `moewb capture` and once under torch.profiler
(CUDA activities), counts CUDA kernels (and copies / memsets) in both, and prints both counts and,
when they differ, the kernel names whose counts differ most. Exits 0 when the kernel counts agree.

Usage: capture-anchor-check.py [--moewb PATH] [--script PATH] [--out DIR] [-- SCRIPT ARGS...]
e.g. (from the GPU bundle) python3 gpu-test-dir/capture-anchor-check.py --moewb bin/moewb \
     --script anchors/moe_layer.py --out out -- 4096 1024 16 4 512
Needs python3 with torch (for the second run) and the stdlib sqlite3 module."""
import argparse
import collections
import json
import os
import sqlite3
import subprocess
import sys

PROFILE_WRAPPER = r"""
import json, runpy, sys
import torch
from torch.profiler import profile, ProfilerActivity
script, trace = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(script)))
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    runpy.run_path(script, run_name="__main__")
    torch.cuda.synchronize()
prof.export_chrome_trace(trace)
"""


def capture_counts(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = collections.Counter(
        dict(db.execute("SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value")))
    copies = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    memsets = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()[0]
    dropped = db.execute("SELECT coalesce(sum(value), 0) FROM stats WHERE name IN "
                         "('cupti_dropped_records', 'cupti_buffers_refused')").fetchone()[0]
    status = db.execute("SELECT status FROM run").fetchone()[0]
    return names, copies, memsets, dropped, status


def torch_counts(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    cats = collections.Counter(e.get("cat") for e in events if e.get("ph") == "X")
    names = collections.Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")
    return names, cats.get("gpu_memcpy", 0), cats.get("gpu_memset", 0)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moewb", default=os.path.join(here, "..", "build-inject", "cli", "moewb"))
    parser.add_argument("--script", default=os.path.join(here, "..", "..", "shared", "anchors", "moe_layer.py"))
    parser.add_argument("--out", default="capture-check")
    parser.add_argument("args", nargs="*", help="arguments of the script (after --)")
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    script = os.path.abspath(opts.script)
    trace = os.path.join(opts.out, "capture.sqlite")

    cmd = [opts.moewb, "capture", "-f", "-o", trace, "--", sys.executable, script] + opts.args
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        print(f"moewb capture failed with exit code {rc}")
        return 1
    ours, our_copies, our_memsets, dropped, status = capture_counts(trace)

    chrome = os.path.join(opts.out, "torch-profile.json")
    cmd = [sys.executable, "-c", PROFILE_WRAPPER, script, chrome] + opts.args
    print("$ python3 -c <torch.profiler wrapper>", script, " ".join(opts.args), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        print(f"the torch.profiler run failed with exit code {rc}")
        return 1
    theirs, their_copies, their_memsets = torch_counts(chrome)

    n_ours, n_theirs = sum(ours.values()), sum(theirs.values())
    print(json.dumps({"name": "capture_anchor_check", "script": os.path.basename(script),
                      "args": opts.args, "moewb_kernels": n_ours, "torch_profiler_kernels": n_theirs,
                      "moewb_memcpy": our_copies, "torch_profiler_memcpy": their_copies,
                      "moewb_memset": our_memsets, "torch_profiler_memset": their_memsets,
                      "moewb_dropped_records": dropped, "moewb_run_status": status,
                      "kernels_agree": n_ours == n_theirs}), flush=True)
    if n_ours != n_theirs:
        diff = {name: ours.get(name, 0) - theirs.get(name, 0) for name in set(ours) | set(theirs)}
        worst = sorted((d for d in diff.items() if d[1] != 0), key=lambda d: -abs(d[1]))[:10]
        print("kernel names whose counts differ (moewb - torch.profiler):")
        for name, d in worst:
            print(f"  {d:+8d}  {name[:160]}")
    return 0 if n_ours == n_theirs else 1


if __name__ == "__main__":
    sys.exit(main())
