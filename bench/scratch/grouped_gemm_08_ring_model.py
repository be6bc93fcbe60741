#!/usr/bin/env python3
"""Host model of one 2-CTA cluster of the round 8 kernel's synchronisation (issue 14).

Models grouped_gemm_ws_cluster_08.cuh's protocol, not its arithmetic (round 7's one-CTA model:
grouped_gemm_07_ring_model.py). Two CTAs walk the same units (K ring steps each; a unit is
"multicast" or "split", the same in both CTAs). Per CTA: a producer, two consumers (unit j to
consumer j % 2, round 7's token between them), full[S] and empty[S] mbarriers.
- Producer of CTA c, ring step it, slot it % S: parity wait on its empty[slot] (parity
  (it / S) & 1 ^ 1), then at once the arrive.expect_tx on its full[slot] (one arrival, +2 halves
  of B), and in flight: its A copies (one arrival when they land) and the B halves: multicast,
  its own half into BOTH CTAs' full[slot]; split, both halves into its own.
- Consumer: parity wait on full[slot]; releases the previous step's slot (the last after the
  unit) by a LOCAL arrival on its empty[slot] (immediate) and a REMOTE one on the partner's
  (in flight). empty completes a phase at 8 arrivals (4 warps x 2 CTAs; one event stands for a
  consumer's 4 warps here: count 2 in the model).
- full completes a phase when both arrivals are in and the tx count is back to 0 (it may go
  negative: a partner's half can land before the expect_tx).
Checked: every parity wait returns exactly for its intended phase (PTX try_wait.parity: with n
phases completed a wait for parity P passes when n % 2 != P); every A / B landing and full
arrival lands in the phase of its ring step; no producer writes a stage (its own or, multicast,
the partner's) before that CTA's consumer has finished the step previously in it; no deadlock.
The empty barriers only COUNT (remote arrivals of different consumer threads are not ordered
with each other, so a release of step it + S may land before one of step it: the model lets
them land in any order, and the stage check above is what must hold).
Random interleavings over ring depths 2..7, K 1..24, 0..7 units, random multicast / split
patterns.
Usage: python3 bench/scratch/grouped_gemm_08_ring_model.py [runs per configuration, default 3]
"""
import random
import sys


class Barrier:
    def __init__(self, arrivals, strict):
        self.count, self.completed, self.pending, self.tx = arrivals, 0, arrivals, 0
        self.strict = strict

    def step(self, arrive, tx, phase, what, run):
        if self.strict and self.completed != phase:
            run.error = f"{what} for phase {phase} landed with {self.completed} completed"
            return
        self.pending -= arrive
        self.tx += tx
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count


class Run:
    def __init__(self, stages, ksteps, units, token, rng):
        self.s, self.k, self.token, self.rng = stages, ksteps, token, rng
        self.multicast = [rng.random() < 0.7 for _ in range(units)]
        self.units = units
        self.full = [[Barrier(2, True) for _ in range(stages)] for _ in (0, 1)]
        self.empty = [[Barrier(2, False) for _ in range(stages)] for _ in (0, 1)]
        self.read_done = [set(), set()]  # ring steps whose stage a CTA's consumer has finished
        self.flight = []  # (cta, kind, it): landing A / B halves, remote releases
        self.p_it = [0, 0]
        self.total = units * ksteps
        self.c = [[{"j": cw, "kt": 0, "phase": "start"} for cw in (0, 1)] for _ in (0, 1)]
        self.passes = [[0, 0], [0, 0]]
        self.waits = [[0, 0], [0, 0]]
        self.error = None

    def wait_ok(self, n, intended):
        passes = n % 2 != intended % 2
        if passes and n != intended + 1:
            self.error = f"wait for phase {intended} returned with {n} phases completed"
        return passes

    def producer(self, c):
        it = self.p_it[c]
        slot, lap = it % self.s, it // self.s
        bar = self.empty[c][slot]
        if lap == 0:
            if bar.completed % 2 == 1:
                return False
            if bar.completed != 0:
                self.error = "first-lap empty wait after a release"
        elif not self.wait_ok(bar.completed, lap - 1):
            return False
        targets = (0, 1) if self.multicast[it // self.k] else (c,)
        for t in targets:  # the stage written must be free in every CTA written
            if it >= self.s and it - self.s not in self.read_done[t]:
                self.error = f"CTA {c} writes step {it} into CTA {t} still reading {it - self.s}"
        self.full[c][slot].step(1, 2, lap, "expect_tx", self)
        self.flight.append((c, "A", it))
        if self.multicast[it // self.k]:
            self.flight += [(c, "B", it), (1 - c, "B", it)]
        else:
            self.flight += [(c, "B", it), (c, "B", it)]
        self.p_it[c] += 1
        return True

    def land(self):
        ev = self.rng.choice(self.flight)
        self.flight.remove(ev)
        c, kind, it = ev
        slot, lap = it % self.s, it // self.s
        if kind == "A":
            self.full[c][slot].step(1, 0, lap, "A arrival", self)
        elif kind == "B":
            self.full[c][slot].step(0, -1, lap, "B half", self)
        else:
            self.empty[c][slot].step(1, 0, lap, "remote release", self)
        return True

    def release(self, c, it):
        self.read_done[c].add(it)
        self.empty[c][it % self.s].step(1, 0, it // self.s, "local release", self)
        self.flight.append((1 - c, "R", it))

    def consumer(self, c, cw):
        st = self.c[c][cw]
        j = st["j"]
        if st["phase"] == "start":
            if j >= self.units:
                st["phase"] = "done"
                return True
            if self.token and j > 0:
                if self.passes[c][cw] <= self.waits[c][cw]:
                    return False
                self.waits[c][cw] += 1
            st["phase"], st["kt"] = "wait", 0
            return True
        if st["phase"] == "wait":
            it = j * self.k + st["kt"]
            if not self.wait_ok(self.full[c][it % self.s].completed, it // self.s):
                return False
            if st["kt"] > 0:
                self.release(c, it - 1)
            st["kt"] += 1
            if st["kt"] == self.k:
                if self.token and j + 1 < self.units:
                    self.passes[c][1 - cw] += 1
                st["phase"] = "release_last"
            return True
        if st["phase"] == "release_last":
            self.release(c, j * self.k + self.k - 1)
            st["j"], st["phase"] = j + 2, "start"
            return True
        return False

    def actions(self):
        acts = []
        for c in (0, 1):
            if self.p_it[c] < self.total:
                acts.append(lambda c=c: self.producer(c))
            for cw in (0, 1):
                if self.c[c][cw]["phase"] != "done":
                    acts.append(lambda c=c, cw=cw: self.consumer(c, cw))
        if self.flight:
            acts.append(self.land)
        return acts

    def go(self):
        while True:
            acts = self.actions()
            if not acts:
                if any(b.pending != b.count or b.tx != 0 for cta in self.full for b in cta):
                    return "full barrier left mid-phase"
                return "ok" if self.error is None else self.error
            self.rng.shuffle(acts)
            if not any(a() for a in acts):
                return "deadlock"
            if self.error is not None:
                return self.error


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rng = random.Random(8)
    bad = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for stages in range(2, 8):
        for ksteps in range(1, 25):
            for units in range(0, 8):
                for token in (True, False):
                    for _ in range(runs):
                        result = Run(stages, ksteps, units, token, rng).go()
                        total[token] += 1
                        if result != "ok":
                            bad[token] += 1
                            if token:
                                print(f"FAIL stages={stages} k={ksteps} units={units}: {result}")
    print(f"cluster protocol with token: {bad[True]} bad runs of {total[True]}")
    print(f"without token (round 7's bug, expected > 0): {bad[False]} bad runs of {total[False]}")
    ok = bad[True] == 0 and bad[False] > 0
    print("MODEL PASS" if ok else "MODEL FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
