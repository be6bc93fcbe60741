#!/usr/bin/env python3
"""Step-time breakdown of a (merged) moewb trace, for the scaling table of bench/RESULTS.md.

Prints one JSON line: ranks, tokens/s of the whole run (tokens of all ranks per step / mean step
time, steps after --skip), mean step ms, and per step and rank the mean ms in: expert compute
(experts.fwd + experts.bwd phases, GPU-timed), all-to-all (all_to_all_v + all_to_all
collectives), FSDP collectives (all_gather + reduce_scatter), other collectives (all_reduce,
broadcast, barrier). Collective times are host times of the calls: for device collectives the
enqueue (plus the waits a blocking call makes), so they measure the communication the step
waited for, not the bytes on the wire. Usage: parallel-breakdown.py TRACE [--skip N] [--name S]
"""
import argparse, json, sqlite3, statistics

def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--skip", type=int, default=5, help="warm-up steps left out")
    p.add_argument("--name", default="")
    a = p.parse_args()
    db = sqlite3.connect(f"file:{a.trace}?mode=ro", uri=True)
    ranks = db.execute("SELECT count(DISTINCT rank) FROM step").fetchone()[0]
    rows = db.execute("SELECT step, rank, end_ns - start_ns, tokens FROM step WHERE step >= ?",
                      (a.skip,)).fetchall()
    steps = sorted({r[0] for r in rows})
    step_ms = statistics.mean(r[2] for r in rows) / 1e6
    tokens_per_step = sum(r[3] for r in rows) / len(steps)
    def phase_ms(names):
        q = ("SELECT coalesce(sum(s.dur_ns), 0) FROM slice s JOIN string n ON s.name = n.id "
             "WHERE n.text IN (%s) AND s.step >= ?" % ",".join("?" * len(names)))
        return db.execute(q, (*names, a.skip)).fetchone()[0] / 1e6 / len(steps) / ranks
    def coll_ms(ops):
        q = ("SELECT coalesce(sum(dur_ns), 0) FROM collective WHERE op IN (%s) AND step >= ?"
             % ",".join("?" * len(ops)))
        return db.execute(q, (*ops, a.skip)).fetchone()[0] / 1e6 / len(steps) / ranks
    out = dict(name=a.name or a.trace, ranks=ranks, steps=len(steps),
               tokens_per_s=round(tokens_per_step / (step_ms / 1e3)),
               step_ms=round(step_ms, 2),
               experts_ms=round(phase_ms(["experts.fwd", "experts.bwd"]), 2),
               all_to_all_ms=round(coll_ms(["all_to_all_v", "all_to_all"]), 2),
               fsdp_ms=round(coll_ms(["all_gather", "reduce_scatter"]), 2),
               other_collectives_ms=round(coll_ms(["all_reduce", "broadcast", "barrier"]), 2))
    print(json.dumps(out))

if __name__ == "__main__":
    main()
