"""Learn recall's calibration (memory/recall/calibration.py) from the recall bench's dumps, and
check it on conversations it did not learn from.

    python bench/recall_locomo.py --data all --db DIR --foreign --set min_confidence=0 --dump DIR/cal.jsonl
    python bench/calibrate_recall.py DIR/cal.jsonl            # prints the constants and the check

Every question is one example, described by the signals of its best block hit (the query-level
ones: the best cosine and keyword share the query found, the share of its weight the store holds
at all, its length; and the hit's own cosine and keyword share): 1 when it is the store's own
question and its block shows evidence; 0 when it is not, and 0 for every question asked of
another conversation's store (`--foreign`): nothing there is about it. (Labelling each hit
instead fails: the evidence the neighbour step lifts, "电话是：010-84166060。", has a lower cosine
and keyword share than a stray hit of another store that names the question's words.) Each set weighs the same (LoCoMo's thousand
questions would otherwise decide for the rest), and within a set the foreign questions weigh as
much as the own ones. The model is a logistic regression (Newton's method, a small L2 penalty),
over the features of `calibration.features`.

The check is leave-one-conversation-out: each conversation's questions (own and foreign) are
scored by a model fitted on every other conversation, so each figure below comes from a model
that never saw that conversation. For each threshold it prints, per set, R@block (evidence shown
among the hits the threshold keeps) against R@block with no threshold, and noise (the share of
foreign questions that still inject anything). The shipped threshold is the highest one whose
R@block loses at most `--loss` points on every set in that check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.recall.calibration import FEATURE_NAMES, Signals, features  # noqa: E402


def load(paths: list[str]) -> list[dict]:
    """One record per question: set, conversation, foreign, its features (those of its best
    block hit; None when the search found nothing), whether the block showed evidence, and its
    R@block."""
    out = []
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            hits = [h for h in r.get("block_hits") or [] if h.get("sig") is not None]
            gold = set(r.get("gold") or ())
            shown = set().union(*[set(h["turns"]) for h in hits if h["shown"]]) if hits else set()
            out.append({"set": r["set"], "conv": r["conv"], "foreign": bool(r.get("foreign")),
                        "x": features(Signals(*hits[0]["sig"])) if hits else None,
                        "recall": len(shown & gold) / len(gold) if gold and not r.get("foreign") else 0.0})
    return out


def examples(records: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels (1: an own question whose block shows evidence) and weights (each set 1 in
    all, its own and its foreign questions half of it each)."""
    rows = [r for r in records if r["x"] is not None]
    mass: dict[tuple[str, bool], int] = defaultdict(int)
    for r in rows:
        mass[(r["set"], r["foreign"])] += 1
    halves: dict[str, int] = defaultdict(int)
    for s, _ in mass:
        halves[s] += 1
    x = np.array([r["x"] for r in rows], dtype=np.float64)
    y = np.array([0.0 if r["foreign"] else float(r["recall"] > 0) for r in rows])
    w = np.array([1.0 / (mass[(r["set"], r["foreign"])] * halves[r["set"]]) for r in rows])
    return x, y, w


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3, steps: int = 50) -> tuple[float, np.ndarray]:
    """Weighted logistic regression by Newton's method: (intercept, weights)."""
    a = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(a.shape[1])
    w = w / w.sum()
    pen = np.full(a.shape[1], l2)
    pen[0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ beta, -60, 60)))
        grad = a.T @ (w * (p - y)) + pen * beta
        hess = (a * (w * p * (1 - p))[:, None]).T @ a + np.diag(pen)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(beta[0]), beta[1:]


def predict(records: list[dict], b: float, wts: np.ndarray) -> None:
    for r in records:
        r["p"] = 0.0 if r["x"] is None else float(1.0 / (1.0 + np.exp(-np.clip(b + np.dot(wts, r["x"]), -60, 60))))


def measure(records: list[dict], tau: float) -> dict[str, tuple[float, float, float]]:
    """Per set: (R@block when questions under the threshold inject nothing, R@block without the
    threshold, share of foreign questions that still inject)."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["foreign"]:
            acc[r["set"]]["noise"].append(float(r["x"] is not None and r["p"] >= tau))
        else:
            acc[r["set"]]["with"].append(r["recall"] if r["p"] >= tau else 0.0)
            acc[r["set"]]["without"].append(r["recall"])
    return {s: (100 * np.mean(v["with"]), 100 * np.mean(v["without"]), 100 * np.mean(v["noise"]) if v["noise"] else float("nan"))
            for s, v in sorted(acc.items())}


def cross_check(records: list[dict]) -> None:
    """Score each conversation with a model fitted on the others (in place)."""
    convs = sorted({(r["set"], r["conv"]) for r in records})
    for held in convs:
        train = [r for r in records if (r["set"], r["conv"]) != held]
        test = [r for r in records if (r["set"], r["conv"]) == held]
        b, w = fit(*examples(train))
        predict(test, b, w)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dumps", nargs="+", help="--dump files of bench/recall_locomo.py run with --foreign and min_confidence=0")
    ap.add_argument("--loss", type=float, default=1.0, help="R@block points a set may lose (default 1)")
    args = ap.parse_args(argv)
    records = load(args.dumps)
    cross_check(records)
    grid = [round(t, 3) for t in np.arange(0.0, 0.6, 0.01)]
    print("leave-one-conversation-out: per set R@block with / without the threshold, noise %")
    best = 0.0
    for tau in grid:
        m = measure(records, tau)
        print(f"tau {tau:.2f}  " + "  ".join(f"{s}: {a:.1f}/{b:.1f} noise {n:.1f}" for s, (a, b, n) in m.items()))
        if all(b - a <= args.loss for a, b, _ in m.values()):
            best = tau
    b, w = fit(*examples(records))
    print(f"\nthreshold (R@block loses <= {args.loss} on every set, left-out check): {best:.2f}")
    for s, (a, b0, n) in measure(records, best).items():
        print(f"  {s}: R@block {b0:.1f} -> {a:.1f}, noise {n:.1f}%")
    print("\n# memory/recall/calibration.py, learned by bench/calibrate_recall.py")
    print(f"INTERCEPT = {b:.4f}")
    print(f"WEIGHTS = ({', '.join(f'{x:.4f}' for x in w)})  # {', '.join(FEATURE_NAMES)}")
    print(f"MIN_CONFIDENCE = {best:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
