#!/usr/bin/env python3
"""Host model of one CTA of the round 7 ping-pong kernel's synchronisation (issue 14).

Models grouped_gemm_ws_pingpong_cuda.cuh's protocol, not its arithmetic: the producer fills ring
step `it` into slot it % S after a parity wait on empty[slot]; a fill lands (full[slot] completes
a phase) at some later, arbitrary time; consumer c takes the CTA's tiles j = c, c + 2, ... (ring
steps j * K .. j * K + K - 1), waits full[slot] by parity, releases the previous step's slot after
the next step's wait, the last one after the tile; with `token` it waits for the other consumer's
pass before its tile and passes after its last full wait (named barriers 1, 2).

mbarrier parity semantics (PTX try_wait.parity): with n phases completed, a wait for parity P
returns at once when n % 2 != P. A wait is CORRECT only if it returns once exactly the intended
phase has completed (n == intended + 1); returning with n < intended + 1 reads a stage that was
never filled (the H200 garbage / hang), n > intended + 1 means the stage was overwritten.

Random interleavings over ring depths 2..7, K steps 1..40, 0..9 tiles a CTA. Prints, per
protocol, the number of runs with a wrong wait or a deadlock. Exit 1 if the token protocol fails
anywhere or the model does not reproduce the bug without the token (K > S - 1, >= 2 tiles).
Usage: python3 bench/scratch/grouped_gemm_07_ring_model.py [runs per configuration, default 4]
"""
import random
import sys


class Run:
    def __init__(self, stages, ksteps, tiles, token, rng):
        self.s, self.k, self.tiles, self.token, self.rng = stages, ksteps, tiles, token, rng
        self.full = [0] * stages   # completed phases
        self.empty = [0] * stages
        self.landing = []          # issued fills not yet landed: ring steps
        self.p_it = 0              # producer: next ring step to fill
        self.p_total = tiles * ksteps
        # consumer state: tile j, step kt, stage of the tile ('token', 'wait', 'release_last')
        self.c = [{"j": cw, "kt": 0, "phase": "start"} for cw in (0, 1)]
        self.token_passes = [0, 0]  # passes received by consumer c
        self.token_waits = [0, 0]
        self.error = None

    def wait_ok(self, n, intended):
        """Hardware result of a parity wait for phase `intended` with n phases completed."""
        passes = n % 2 != intended % 2
        if passes and n != intended + 1:
            self.error = f"wait for phase {intended} returned with {n} phases completed"
        return passes

    def actions(self):
        acts = []
        if self.p_it < self.p_total:
            acts.append(self.producer)
        if self.landing:
            acts.append(self.land)
        for cw in (0, 1):
            if self.c[cw]["phase"] != "done":
                acts.append(lambda cw=cw: self.consumer(cw))
        return acts

    def producer(self):
        it = self.p_it
        slot = it % self.s
        # empty wait parity (it / S) & 1 ^ 1: intended phase it / S - 1 (none for the first lap)
        if it // self.s == 0:
            passes = self.empty[slot] % 2 != 1  # a fresh barrier passes parity 1 at once
            if passes and self.empty[slot] != 0:
                self.error = "first-lap empty wait after a release"
        else:
            passes = self.wait_ok(self.empty[slot], it // self.s - 1)
        if not passes:
            return False
        self.landing.append(it)
        self.p_it += 1
        return True

    def land(self):
        it = self.rng.choice(self.landing)
        self.landing.remove(it)
        self.full[it % self.s] += 1
        return True

    def consumer(self, cw):
        st = self.c[cw]
        j = st["j"]
        if st["phase"] == "start":
            if j >= self.tiles:
                st["phase"] = "done"
                return True
            if self.token and j > 0:
                if self.token_passes[cw] <= self.token_waits[cw]:
                    return False
                self.token_waits[cw] += 1
            st["phase"], st["kt"] = "wait", 0
            return True
        if st["phase"] == "wait":
            it = j * self.k + st["kt"]
            if not self.wait_ok(self.full[it % self.s], it // self.s):
                return False
            if st["kt"] > 0:
                self.empty[(it - 1) % self.s] += 1  # release the previous step
            st["kt"] += 1
            if st["kt"] == self.k:
                if self.token and j + 1 < self.tiles:
                    self.token_passes[1 - cw] += 1
                st["phase"] = "release_last"
            return True
        if st["phase"] == "release_last":
            self.empty[(j * self.k + self.k - 1) % self.s] += 1
            st["j"], st["phase"] = j + 2, "start"
            return True
        return False

    def go(self):
        while True:
            acts = self.actions()
            if not acts:
                return "ok" if self.error is None else self.error
            self.rng.shuffle(acts)
            if not any(a() for a in acts):
                return "deadlock"
            if self.error is not None:
                return self.error


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    rng = random.Random(14)
    bad = {True: 0, False: 0}
    bug_expected = bug_seen = 0
    total = 0
    for stages in range(2, 8):
        for ksteps in range(1, 41):
            for tiles in range(0, 10):
                for token in (True, False):
                    fails = 0
                    for _ in range(runs):
                        result = Run(stages, ksteps, tiles, token, rng).go()
                        fails += result != "ok"
                    total += runs if token else 0
                    bad[token] += fails
                    if not token and ksteps > stages - 1 and tiles >= 2:
                        bug_expected += 1
                        bug_seen += fails > 0
                    if token and fails:
                        print(f"TOKEN FAIL stages={stages} k={ksteps} tiles={tiles}")
    print(f"token protocol: {bad[True]} bad runs of {total}")
    print(f"no token: {bad[False]} bad runs; configurations K > S - 1 with >= 2 tiles showing the "
          f"bug: {bug_seen} of {bug_expected}")
    ok = bad[True] == 0 and bug_seen > 0
    print("MODEL PASS" if ok else "MODEL FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
