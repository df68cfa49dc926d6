"""Local-progress detection: exact p-value on a hand case, level under the null, power, file helpers and the CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchfill.cli import app
from benchfill.data import ResponseMatrix
from benchfill.diagnostics.detect import detect_models, min_p_value, randomization_test, read_item_ids
from benchfill.errors import InputError


def _exact_p(k_a, n_a, k_b, n_b) -> float:
    """Enumerate every relabelling of the rollouts (each item's pooled rollouts, choose which n_b are B's)."""
    per_item = []
    for ka, na, kb, nb in zip(k_a, n_a, k_b, n_b):
        pooled = [1] * (ka + kb) + [0] * (na + nb - ka - kb)
        splits = []
        for b_pos in itertools.combinations(range(na + nb), nb):
            kb_star = sum(pooled[j] for j in b_pos)
            splits.append(kb_star / nb - (ka + kb - kb_star) / na)
        per_item.append(splits)
    observed = np.mean([kb / nb - ka / na for ka, na, kb, nb in zip(k_a, n_a, k_b, n_b)])
    stats = [np.mean(c) for c in itertools.product(*per_item)]
    return float(np.mean([s >= observed - 1e-12 for s in stats]))


def test_p_value_exact_on_hand_case() -> None:
    # 2 items, 2 + 2 rollouts each: 6 x 6 = 36 equally likely relabellings.
    k_a, n_a, k_b, n_b = [1, 0], [2, 2], [2, 1], [2, 2]
    exact = _exact_p(k_a, n_a, k_b, n_b)
    # By hand: T = ((1 - 0.5) + (0.5 - 0)) / 2 = 0.5. Item 1 (3 of 4 correct): B gets 2 w.p. 1/2, 1 w.p. 1/2 ->
    # diff +0.5 / -0.5. Item 2 (1 of 4): B gets 1 w.p. 1/2 -> +0.5, else -0.5. T* >= 0.5 iff both +0.5: 1/4.
    assert exact == pytest.approx(0.25)
    B = 200_000
    res = randomization_test(k_a, n_a, k_b, n_b, n_permutations=B, seed=1)
    assert res.statistic == pytest.approx(0.5)
    se = math.sqrt(exact * (1 - exact) / B)
    assert abs(res.p_value - exact) < 5 * se
    assert res.n_informative == 2 and res.n_items == 2


def test_p_value_exact_unequal_rollouts() -> None:
    k_a, n_a, k_b, n_b = [1, 2, 0], [3, 2, 2], [2, 1, 2], [2, 3, 3]
    exact = _exact_p(k_a, n_a, k_b, n_b)
    res = randomization_test(k_a, n_a, k_b, n_b, n_permutations=100_000, seed=3)
    assert abs(res.p_value - exact) < 5 * math.sqrt(exact * (1 - exact) / 100_000) + 1e-5


def test_p_value_exact_with_pooled_strata() -> None:
    # Identical strata are drawn as one convolved group: still the exact permutation law (6^4 = 1296 relabellings).
    k_a, n_a, k_b, n_b = [1, 1, 1, 0], [2, 2, 2, 2], [2, 2, 1, 1], [2, 2, 2, 2]
    exact = _exact_p(k_a, n_a, k_b, n_b)
    res = randomization_test(k_a, n_a, k_b, n_b, n_permutations=200_000, seed=11)
    assert abs(res.p_value - exact) < 5 * math.sqrt(exact * (1 - exact) / 200_000)


def test_matches_direct_rollout_shuffling() -> None:
    # Shuffle individual rollouts within each item (the textbook test) and compare p-values.
    rng = np.random.default_rng(9)
    n_a, n_b = np.array([8, 8, 8, 8, 6, 6, 10]), np.array([8, 8, 8, 8, 10, 6, 4])
    k_a, k_b = np.array([3, 3, 5, 3, 2, 1, 7]), np.array([5, 5, 6, 5, 6, 3, 3])
    B = 40_000
    t_obs = np.mean(k_b / n_b - k_a / n_a)
    stats = np.zeros(B)
    for ka, na, kb, nb in zip(k_a, n_a, k_b, n_b):
        pooled = np.tile(np.r_[np.ones(ka + kb), np.zeros(na + nb - ka - kb)], (B, 1))
        shuffled = rng.permuted(pooled, axis=1)
        kb_star = shuffled[:, :nb].sum(1)
        stats += (kb_star / nb - (ka + kb - kb_star) / na) / len(k_a)
    count = int(np.sum(stats >= t_obs - 1e-12))
    direct = (1 + count) / (1 + B)
    res = randomization_test(k_a, n_a, k_b, n_b, n_permutations=B, seed=4)
    se = math.sqrt(2 * direct * (1 - direct) / B)
    assert abs(res.p_value - direct) < 5 * se


def test_p_formula_and_degenerate_items() -> None:
    # Every pooled item all-correct: every permutation reproduces T, so p = (1 + B) / (1 + B) = 1.
    res = randomization_test([4, 4], [4, 4], [4, 4], [4, 4], n_permutations=999)
    assert res.p_value == 1.0 and res.statistic == 0.0 and res.n_informative == 0
    # A single permutation: p is 1/2 or 1.
    res = randomization_test([0] * 5, [8] * 5, [8] * 5, [8] * 5, n_permutations=1, seed=0)
    assert res.p_value in (0.5, 1.0)
    assert min_p_value(100_000) == pytest.approx(1 / 100_001)
    # Extreme improvement on 30 items: p hits its floor 1 / (1 + B).
    res = randomization_test([0] * 30, [32] * 30, [32] * 30, [32] * 30, n_permutations=2_000)
    assert res.p_value == pytest.approx(1 / 2_001) and res.significant


def test_statistic_definition_and_gain() -> None:
    k_a, n_a = np.array([3, 10, 0]), np.array([8, 16, 4])
    k_b, n_b = np.array([5, 12, 1]), np.array([8, 16, 4])
    res = randomization_test(k_a, n_a, k_b, n_b, n_permutations=10)
    per_item = np.mean(k_b / n_b - k_a / n_a)
    assert res.statistic == pytest.approx(per_item)
    # Equal rollouts per item: the same as the pooled accuracy difference.
    k_a2, k_b2, n = np.array([3, 7, 1]), np.array([5, 6, 4]), np.array([8, 8, 8])
    res2 = randomization_test(k_a2, n, k_b2, n, n_permutations=10)
    assert res2.statistic == pytest.approx(k_b2.sum() / n.sum() - k_a2.sum() / n.sum())
    assert res.gain == pytest.approx(100 * res.statistic)
    assert res.accuracy_b - res.accuracy_a == pytest.approx(res.statistic)
    assert json.loads(res.model_dump_json())["n_permutations"] == 10


def test_seeded_and_drops_unattempted_items() -> None:
    rng = np.random.default_rng(0)
    k_a, k_b = rng.binomial(8, 0.5, 20), rng.binomial(8, 0.55, 20)
    n = np.full(20, 8)
    r1 = randomization_test(k_a, n, k_b, n, n_permutations=3_000, seed=7)
    r2 = randomization_test(k_a, n, k_b, n, n_permutations=3_000, seed=7)
    assert r1.p_value == r2.p_value
    n_b = n.copy()
    n_b[:3] = 0
    k_b0 = k_b.copy()
    k_b0[:3] = 0
    assert randomization_test(k_a, n, k_b0, n_b, n_permutations=10).n_items == 17


@pytest.mark.parametrize(
    "args",
    [
        ([1, 2], [2, 2], [1], [2]),  # ragged
        ([3], [2], [1], [2]),  # k > n
        ([-1], [2], [1], [2]),  # negative
        ([0.5], [2], [1], [2]),  # not whole
        ([0], [0], [0], [2]),  # no item with both
    ],
)
def test_bad_counts(args) -> None:
    with pytest.raises(InputError):
        randomization_test(*args, n_permutations=10)


def test_bad_settings() -> None:
    with pytest.raises(InputError):
        randomization_test([1], [2], [1], [2], alpha=1.5)
    with pytest.raises(InputError):
        randomization_test([1], [2], [1], [2], n_permutations=0)


def test_level_under_null() -> None:
    # Both models share each item's success rate: rejections at alpha must stay <= alpha (+ MC slack).
    rng = np.random.default_rng(2024)
    reps, items, rollouts, alpha = 400, 30, 8, 0.05
    rejections = 0
    for r in range(reps):
        p = rng.uniform(0.05, 0.95, items)
        n = np.full(items, rollouts)
        res = randomization_test(rng.binomial(n, p), n, rng.binomial(n, p), n, n_permutations=2_000, seed=r,
                                 alpha=alpha)
        rejections += res.significant
    assert rejections / reps <= alpha + 0.02


def test_power_on_planted_improvement() -> None:
    # Table 12 shape: 30 items x 32 rollouts; B gains 0.5 on 6 items (local progress): mean gain 0.1, about 5 SDs
    # of the null statistic. (A 0.4 gain on 3 items, 2 SDs, is caught only about half the time.)
    rng = np.random.default_rng(5)
    reps, hits = 40, 0
    for r in range(reps):
        p = rng.uniform(0.1, 0.9, 30)
        p[:6] = rng.uniform(0.05, 0.45, 6)
        p_b = p.copy()
        p_b[:6] += 0.5
        n = np.full(30, 32)
        res = randomization_test(rng.binomial(n, p), n, rng.binomial(n, p_b), n, n_permutations=2_000, seed=r)
        hits += res.significant
    assert hits / reps >= 0.9


def test_speed_100k_permutations() -> None:
    # Generous budgets for a loaded 2-core machine; typical: 0.1 s (30 items), 0.2 s (500), 1.3 s (500 distinct).
    import time

    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, 500)
    for n_a, n_b, budget in (
        (np.full(30, 32), np.full(30, 32), 3.0),
        (np.full(500, 32), np.full(500, 32), 5.0),
        (rng.integers(20, 40, 500), rng.integers(20, 40, 500), 15.0),  # unequal rollouts: no strata pool
    ):
        q = p[: n_a.size]
        start = time.perf_counter()
        res = randomization_test(rng.binomial(n_a, q), n_a, rng.binomial(n_b, q), n_b)
        assert res.n_permutations == 100_000
        assert time.perf_counter() - start < budget


# ------------------------------------------------------------------------------------------ response matrices


def _matrix(models: list[str], correct: list[list[int]], trials: int = 8, source: str = "<m>") -> ResponseMatrix:
    c = np.array(correct, dtype=np.int64)
    return ResponseMatrix(models, [f"q{i}" for i in range(c.shape[1])], c, np.full_like(c, trials), source)


def test_detect_models_one_and_two_matrices() -> None:
    both = _matrix(["a", "b"], [[1, 2, 3, 4], [5, 6, 7, 8]])
    res = detect_models(both, model_a="a", model_b="b", n_permutations=500)
    assert (res.model_a, res.model_b, res.n_items) == ("a", "b", 4)
    assert res.statistic == pytest.approx(0.5)
    sub = detect_models(both, model_a="a", model_b="b", items=["q3", "q0"], n_permutations=500)
    assert sub.n_items == 2 and sub.statistic == pytest.approx(0.5)
    a = _matrix(["ck1"], [[1, 2, 3, 4]])
    b = ResponseMatrix(["ck2"], ["q2", "q0", "q9"], np.array([[8, 8, 8]]), np.full((1, 3), 8), "<b>")
    res = detect_models(a, b, n_permutations=500)  # common items q0, q2
    assert res.n_items == 2 and res.statistic == pytest.approx(np.mean([1 - 1 / 8, 1 - 3 / 8]))
    with pytest.raises(InputError, match="pick one with --model-a"):
        detect_models(both, b)
    with pytest.raises(InputError, match="same model"):
        detect_models(both, model_a="a", model_b="a")
    with pytest.raises(InputError, match="not in this file"):
        detect_models(a, b, items=["q1"])
    with pytest.raises(InputError, match="both models"):
        detect_models(both)


def test_read_item_ids(tmp_path: Path) -> None:
    f = tmp_path / "items.txt"
    f.write_text("# fill items\nq1\n\n q2  # new\n")
    assert read_item_ids(f) == ["q1", "q2"]
    f.write_text("q1\nq1\n")
    with pytest.raises(InputError, match="duplicate"):
        read_item_ids(f)


# ------------------------------------------------------------------------------------------------------ CLI


def _write(path: Path, rows: list[tuple[str, str, int, int]]) -> Path:
    path.write_text("model,item_id,n_correct,n_trials\n" + "".join(f"{m},{i},{c},{t}\n" for m, i, c, t in rows))
    return path


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_cli_detect_two_checkpoint_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.csv", [("ck1", f"q{i}", 2, 32) for i in range(10)])
    b = _write(tmp_path / "b.csv", [("ck2", f"q{i}", 30, 32) for i in range(10)])
    out = tmp_path / "res" / "detect.json"
    result = CliRunner().invoke(app, ["detect", str(a), str(b), "--permutations", "2000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "ck2 (B) vs ck1 (A)" in result.stdout
    data = json.loads(out.read_text())
    assert data["significant"] and data["p_value"] == pytest.approx(1 / 2001) and data["n_items"] == 10
    assert data["gain"] == pytest.approx(100 * 28 / 32)


def test_cli_detect_one_file_with_items(tmp_path: Path) -> None:
    rows = [("base", f"q{i}", 4, 8) for i in range(6)] + [("sft", f"q{i}", 4 + (i < 2) * 4, 8) for i in range(6)]
    f = _write(tmp_path / "r.csv", rows)
    items = tmp_path / "gap_items.txt"
    items.write_text("q0\nq1\n")
    out = tmp_path / "d.json"
    result = CliRunner().invoke(app, ["detect", str(f), "--model-a", "base", "--model-b", "sft", "--items", str(items),
                                      "--permutations", "1000", "--seed", "3", "--alpha", "0.1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["n_items"] == 2 and data["statistic"] == pytest.approx(0.5) and data["alpha"] == 0.1
    assert (data["model_a"], data["model_b"], data["seed"]) == ("base", "sft", 3)


def test_cli_detect_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    both = _write(tmp_path / "r.csv", [("x", "q0", 1, 4), ("y", "q0", 2, 4)])
    one = _write(tmp_path / "one.csv", [("z", "q0", 1, 4)])
    bad = tmp_path / "bad.csv"
    bad.write_text("model,item_id,n_correct,n_trials\nz,q0,5,4\n")
    items = tmp_path / "items.txt"
    items.write_text("q7\n")
    cases = [
        (["detect", str(tmp_path / "missing.csv"), str(one)], "file not found"),
        (["detect", str(both), str(one)], "pick one with --model-a"),
        (["detect", str(both), "--model-a", "x", "--model-b", "nope"], "not a model"),
        (["detect", str(one)], "--model-a and --model-b"),
        (["detect", str(bad), str(one)], "n_correct=5 > n_trials=4"),
        (["detect", str(both), "--model-a", "x", "--model-b", "y", "--items", str(items)], "q7"),
        (["detect", str(both), "--model-a", "x", "--model-b", "y", "--alpha", "2"], "alpha"),
        (["detect", str(both), "--model-a", "x", "--model-b", "y", "--permutations", "0"], "permutations"),
    ]
    for args, needle in cases:
        err = _one_line_error(runner.invoke(app, args))
        assert needle in err, (args, err)
