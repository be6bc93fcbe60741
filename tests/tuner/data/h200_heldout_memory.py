#!/usr/bin/env python3
"""Prints one line of h200_heldout_memory.txt per trace: name | overrides | fixed | turn |
act_peak | peak (MiB), read from the trace's memory_event rows of step 3 (activations and
workspace blocks in event order; the turn is the last event before the first gap of more than
10 ms between events, where the host waits for the loss before it queues the backward).
Usage: h200_heldout_memory.py NAME 'KEY=VALUE ...' TRACE.sqlite [NAME 'OVERRIDES' TRACE ...]"""
import sqlite3
import sys

MIB = 2.0**20


def line(name, overrides, path, step=3):
    db = sqlite3.connect(path)
    events = db.execute(
        "SELECT m.ts_ns, m.kind, m.bytes FROM memory_event m JOIN string s ON s.id = m.category "
        "WHERE m.step = ? AND s.text IN ('activations', 'workspace') ORDER BY m.ts_ns, m.id",
        (step,)).fetchall()
    total, peak, turn = 0, 0, None
    for i, (ts, kind, size) in enumerate(events):
        if turn is None and i > 0 and ts - events[i - 1][0] > 10e6:
            turn = total
        total += size if kind == "alloc" else -size
        peak = max(peak, total)
    fixed = sum(r[0] for r in db.execute(
        "SELECT MAX(m.in_use_bytes) FROM memory_event m JOIN string s ON s.id = m.category "
        "WHERE s.text IN ('weights', 'grads', 'optimizer') GROUP BY s.text"))
    row = db.execute("SELECT MAX(peak_bytes) FROM step").fetchone()[0]
    return "%s | %s | %.2f | %.2f | %.2f | %.2f" % (name, overrides or "-", fixed / MIB,
                                                   (turn or 0) / MIB, peak / MIB, row / MIB)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 3:
        sys.exit(__doc__)
    for i in range(0, len(args), 3):
        print(line(*args[i:i + 3]))
