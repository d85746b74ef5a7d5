"""What crash isolation (properties/isolation.py, --isolate) costs per example, and to start.

For each property (invariant, op) it draws the cases the suite would (the profile's shapes), then
checks them all in this process, then all in the isolation worker, REPEATS times alternately,
keeping each case's fastest time in each mode: a load that comes and goes hits both modes alike
(on a shared machine whole pytest runs differ by more than the cost measured here). Prints
examples per second both ways per property, the worker's start (cold: the fork server imports
torch, triton and the suite; warm: a fork), and a crash's cost (a segfault, then the next
example on a fresh worker).

    python benchmarks/isolation_cost.py                       # without CUDA: interpreter, ci shapes
    python benchmarks/isolation_cost.py --profile gpu         # on a GPU: the gpu profile's shapes

Options: --target (default kernels), --examples (cases per property, default 30), --repeats
(default 3), --profile (default: ci without CUDA, else gpu), --pairs INV-OP,... (default: a
forward, a layout law, a VJP, autograd, a merge and cross-entropy).
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

DEFAULT_PAIRS = ("matches_oracle-softmax,layout_invariance-log_softmax,vjp_matches_fp64_autograd-softmax_backward,"
                 "gradcheck_float64-logsumexp,merge_tree_matches_one_shot-softmax_merge,"
                 "ce_matches_oracle-cross_entropy_backward")


def draw(inv, op, n):
    """n cases of op as the suite draws them for inv (derandomized)."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    from softmax_properties.properties import strategies as S
    out = []

    @settings(max_examples=n, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data):
        out.append(data.draw(S.cases(op, inv.families, inv.max_cols)))

    collect()
    return out[:n]


def timed(fn):
    t0 = time.perf_counter()
    try:
        fn()
    except Exception:  # noqa: BLE001 - a failure or a rejection costs its time like a pass
        pass
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="kernels")
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="gpu" if torch.cuda.is_available() else "ci")
    ap.add_argument("--pairs", default=DEFAULT_PAIRS)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    from softmax_properties.properties import interpreter, isolation, strategies as S, targets
    from softmax_properties.properties.invariants import REGISTRY
    from softmax_properties.properties.ops import Target
    from softmax_properties.properties.plugin import LIMITS
    if interpreter.interpreting():
        interpreter.install()
    S.set_limits(LIMITS.get(args.profile, LIMITS["dev"]))
    target = Target(targets.resolve(args.target))
    target.device = interpreter.device()
    target.record = False
    invs = {inv.name: inv for inv in REGISTRY}
    print(f"device={target.device} profile={args.profile} target={args.target} torch threads={torch.get_num_threads()}")

    t0 = time.perf_counter()
    isolation.supports_autograd(target, "softmax")  # starts the fork server and a worker
    cold = time.perf_counter() - t0
    isolation.shutdown()
    t0 = time.perf_counter()
    isolation.worker().start(isolation._preload(target))
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    isolation.supports_autograd(target, "log_softmax")
    first = time.perf_counter() - t0

    print(f"\n{'property':58s} {'cases':>5s} {'in-process /s':>14s} {'isolated /s':>12s} {'ratio':>6s} {'per example':>12s}")
    tot = [0, 0.0, 0.0]
    for pair in args.pairs.split(","):
        name, op = pair.split("-", 1)
        inv = invs[name]
        cases = draw(inv, op, args.examples)
        times = {0: [[] for _ in cases], 1: [[] for _ in cases]}
        for r in range(args.repeats):
            # mode by mode over all the cases: while one process runs torch the other is idle (its
            # OpenMP threads would otherwise compete for the cores, which a real run never sees)
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                for i, case in enumerate(cases):
                    run = (lambda: inv.check(case, target)) if k == 0 else (lambda: isolation.check(inv, case, target))
                    times[k][i].append(timed(run))
        direct = sum(min(t) for t in times[0])
        isolated = sum(min(t) for t in times[1])
        n = len(cases)
        tot[0] += n
        tot[1] += direct
        tot[2] += isolated
        print(f"{pair:58s} {n:5d} {n / direct:14.2f} {n / isolated:12.2f} {direct / isolated:6.3f} "
              f"{(isolated - direct) / n * 1e3:+9.2f} ms", flush=True)
    print(f"{'all':58s} {tot[0]:5d} {tot[0] / tot[1]:14.2f} {tot[0] / tot[2]:12.2f} {tot[1] / tot[2]:6.3f} "
          f"{(tot[2] - tot[1]) / tot[0] * 1e3:+9.2f} ms")
    print(f"\nworker start: {cold:.2f} s cold (the fork server imports torch, triton and the suite; once per pytest "
          f"process), {warm:.3f} s warm (a fork), then {first:.3f} s for the first call of the target in the new "
          f"process (the autograd probe)")

    crasher = Target("softmax_properties.properties.faulty.misbehaves")
    crasher.device = "cpu"
    from softmax_properties.properties.case import Case
    from softmax_properties.properties.strategies import Input, Layout, Logits
    case = lambda cols: Case("softmax", torch.float32, (Input(Logits(2, cols, "float32", ("normal", 1, 1.0)), (2,), Layout()),))
    inv = invs["matches_oracle"]
    timed(lambda: isolation.check(inv, case(4), crasher))
    crash = timed(lambda: isolation.check(inv, case(10), crasher))
    after = timed(lambda: isolation.check(inv, case(4), crasher))
    steady = min(timed(lambda: isolation.check(inv, case(4), crasher)) for _ in range(5))
    print(f"a crash: {crash * 1e3:.0f} ms to report the segfault, {after * 1e3:.0f} ms for the next example on a fresh "
          f"worker (steady: {steady * 1e3:.1f} ms)")
    isolation.shutdown()


if __name__ == "__main__":
    main()
