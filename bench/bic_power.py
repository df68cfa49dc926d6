"""How often the 1PL vs 2PL BIC comparison (`diagnose --robustness`) prefers 2PL when the truth IS 2PL, and how
often it wrongly does when the truth is 1PL: its measured power and false-positive rate with a 12-model panel.

    python bench/bic_power.py [--reps 10] [--items 200] [--rollouts 4]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchfill.irt.robustness import compare_1pl_2pl
from benchfill.irt.simulate import simulate_responses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--rollouts", type=int, default=4)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    prefer_2pl = {"2pl truth (a ~ LogNormal(0, 0.5))": 0, "1pl truth": 0}
    for _ in range(args.reps):
        theta, b = rng.normal(size=args.models), rng.normal(size=args.items)
        for label, a in (("2pl truth (a ~ LogNormal(0, 0.5))", rng.lognormal(0, 0.5, args.items)), ("1pl truth", None)):
            resp = simulate_responses(theta, b, args.rollouts, a=a, seed=rng)
            prefer_2pl[label] += compare_1pl_2pl(resp).preferred == "2pl"
    for label, k in prefer_2pl.items():
        print(f"{args.models} models x {args.items} items x {args.rollouts} rollouts, {label}: BIC prefers 2PL in "
              f"{k}/{args.reps}")


if __name__ == "__main__":
    main()
