"""Designer evaluation recovers planted VALUES end to end (simulated world; issue 15), and a null world where nothing
is planted detects nothing.

Two module-scoped runs (``@pytest.mark.slow``; ~1 min together on 2 cores):

- the planted world: seven designers x 150 items, eight answerers, two rollouts, the seed benchmark's items with
  levels and level-dependent difficulty. Planted: difficulty shifts +1.5 / -1.0, inverted calibration (slope -0.6),
  a mislabelling designer (half its items written at a random level: slope 0.6 -> 0.3), 2PL slopes (2.0 vs 1.0),
  negative-discrimination items (30 %), a self bonus (+1.5 logits) with a family bonus (+1.0) to its family's
  other answerer, and a judge biased for one designer (half its flawed items that reach the judge called clean).
- the null world: the same panel and families, three designers, nothing planted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchfill.designers.card import Category, DomainCard, save_card
from benchfill.designers.pipeline import read_jsonl, run_designers

ABILITIES = {"ref": 1.5, "selfish": 1.0, "hard": 0.5, "selfish-mini": 0.0, "x1": -0.5, "x2": -1.0, "x3": -1.5,
             "x4": -2.0}
FAMILIES = {"ref": "R", "selfish": "S", "hard": "H", "selfish-mini": "S", "x1": "X", "x2": "Y", "x3": "Z", "x4": "W"}
PLANTED = {
    "ref": {},
    "hard": {"difficulty_shift": 1.5},
    "easy": {"difficulty_shift": -1.0},
    "inverted": {"level_slope": -0.6},
    "mislabel": {"mislabel_rate": 0.5},
    "sharp": {"item_slope": 2.0},
    "negative": {"negative_rate": 0.3},
    "selfish": {"self_bonus": 1.5, "family_bonus": 1.0},
    "favoured": {"broken_rate": 0.4, "flaw_mix": {"gold_incorrect": 1.0}, "judge_favour": 0.5},
}
DESIGNER_FAMILY = {"easy": "E", "inverted": "I", "mislabel": "M", "sharp": "P", "negative": "N", "favoured": "F",
                   **FAMILIES}


def _config(designers: dict[str, dict], rollouts: int = 2, abilities: dict[str, float] = ABILITIES,
            families: dict[str, str] = FAMILIES, designer_family: dict[str, str] = DESIGNER_FAMILY) -> str:
    lines = ["seed = 0", "[defaults]", f"rollouts = {rollouts}", "[run]", "batch_size = 25", "bootstrap = 300",
             "[sim]", "seed = 11", "[sim.abilities]"]
    lines += [f'"{k}" = {v}' for k, v in abilities.items()]
    for name, kw in designers.items():
        lines.append(f"[sim.designers.{name}]")
        kw = {"broken_rate": 0.0, "difficulty_noise": 0.5, **kw}
        for k, v in kw.items():
            lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else '{ ' + ', '.join(f'{a} = {b}' for a, b in v.items()) + ' }'}")
    lines += ["[judge]", 'model = "sim/judge"']
    for name in designers:
        lines += ["[[designers]]", f'model = "sim/{name}"', f'name = "{name}"', f'family = "{designer_family[name]}"']
    for name in abilities:
        lines += ["[[panel]]", f'model = "sim/{name}"', f'name = "{name}"', f'family = "{families[name]}"']
    return "\n".join(lines) + "\n"


def _inputs(folder: Path, designers: dict[str, dict], total: int, **world) -> dict[str, Path]:
    """The card, quotas and config of a planted world (``world``: abilities / families / designer_family of
    :func:`_config`, the module's panel by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.toml").write_text(_config(designers, **world))
    (folder / "q.yaml").write_text(f"total: {total}\nformats: {{numeric: 0.7, short: 0.3}}\n"
                                   "difficulty: {L1: 0.2, L2: 0.2, L3: 0.2, L4: 0.2, L5: 0.2}\n")
    # seed items with levels and a level-dependent latent difficulty (0.6 logits per level, as the designers')
    rng = np.random.default_rng(5)
    rows = []
    for k in range(150):
        lv = 1 + k % 5
        b = 0.6 * (lv - 3) + 0.5 * float(rng.standard_normal())
        rows.append({"id": f"seed{k}", "question": f"seed question {k}: what is {k} + 1?", "answer": str(k + 1),
                     "format": "numeric", "metadata": {"level": lv, "subject": "Arithmetic", "sim_latent_b": b}})
    (folder / "seed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    save_card(DomainCard(name="truth", source=str(folder / "seed.jsonl"), n_items=150, modality="text", language="en",
                         formats={"numeric": 150}, difficulty_levels={f"L{k}": 30 for k in range(1, 6)},
                         ontology=[Category(name="Arithmetic", count=150, share=1.0)]), folder / "card.yaml")
    return {"card": folder / "card.yaml", "quotas": folder / "q.yaml", "config": folder / "cfg.toml"}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("truth")
    p = _inputs(folder, PLANTED, 150)
    res = run_designers(p["card"], p["quotas"], p["config"], folder / "out")
    return res, folder / "out"


@pytest.fixture(scope="module")
def null(tmp_path_factory):
    folder = tmp_path_factory.mktemp("null")
    p = _inputs(folder, {"ref": {}, "selfish": {}, "hard": {}}, 150)
    return run_designers(p["card"], p["quotas"], p["config"], folder / "out")


def rows(report):
    return {r["designer"]: r for r in report["designers"]}


def effect(report, name):
    return rows(report)[name]["difficulty"]["designer_effect"]


@pytest.mark.slow
def test_difficulty_shifts_are_recovered_not_halved(planted):
    res, _ = planted
    ref = effect(res.report.model_dump(mode="json"), "ref")["mu"]
    hard, easy = effect(res.report.model_dump(mode="json"), "hard"), effect(res.report.model_dump(mode="json"), "easy")
    # seen: +1.33 and -1.03 for planted +1.5 and -1.0 (a mean-b difference of shrunk items gave about half)
    assert hard["mu"] - ref == pytest.approx(1.5, abs=0.3)
    assert easy["mu"] - ref == pytest.approx(-1.0, abs=0.3)
    assert hard["mu_ci"][0] > effect(res.report.model_dump(mode="json"), "ref")["mu_ci"][1]  # the intervals separate
    print("planted world:", {n: (round(effect(res.report.model_dump(mode="json"), n)["mu"] - ref, 2), round(effect(res.report.model_dump(mode="json"), n)["beta"], 2),
                                 round(effect(res.report.model_dump(mode="json"), n)["slope"], 2)) for n in PLANTED})


@pytest.mark.slow
def test_calibration_slopes_inverted_and_mislabelled(planted):
    res, _ = planted
    # seen: 0.57, -0.53, 0.27 for planted 0.6, -0.6 and 0.6 x (1 - 0.5)
    assert effect(res.report.model_dump(mode="json"), "ref")["beta"] == pytest.approx(0.6, abs=0.12)
    assert effect(res.report.model_dump(mode="json"), "inverted")["beta"] == pytest.approx(-0.6, abs=0.12)
    assert effect(res.report.model_dump(mode="json"), "mislabel")["beta"] == pytest.approx(0.3, abs=0.12)
    r = rows(res.report.model_dump(mode="json"))
    assert r["inverted"]["calibration"]["spearman"] < -0.3 < 0.3 < r["ref"]["calibration"]["spearman"]
    # per-level shift vs the seed benchmark (same slope as ref): |(-0.6 - 0.6)(L - 3)| averages 1.44 for inverted
    assert r["inverted"]["calibration"]["error"] == pytest.approx(1.44, abs=0.35)
    assert r["ref"]["calibration"]["error"] < 0.45
    assert set(r["inverted"]["calibration"]["by_level"]) == {"L1", "L2", "L3", "L4", "L5"}
    # the design score ranks the miscalibrated designers below ref on the calibration component
    assert r["ref"]["design_score"] > r["inverted"]["design_score"]


@pytest.mark.slow
def test_two_pl_slopes_and_negative_discrimination(planted):
    res, _ = planted
    r = rows(res.report.model_dump(mode="json"))
    # seen: a = 2.05 vs 1.17 (ratio 1.75 for planted 2.0); 38 % negative items for planted 30 %
    assert effect(res.report.model_dump(mode="json"), "sharp")["slope"] / effect(res.report.model_dump(mode="json"), "ref")["slope"] == pytest.approx(2.0, abs=0.35)
    assert r["negative"]["discrimination"]["share_negative"] == pytest.approx(0.3, abs=0.1)
    assert r["ref"]["discrimination"]["share_negative"] < 0.05
    assert effect(res.report.model_dump(mode="json"), "negative")["slope"] < 0.5 * effect(res.report.model_dump(mode="json"), "ref")["slope"]


@pytest.mark.slow
def test_self_and_family_preference_recovered_on_the_logit_scale(planted):
    res, _ = planted
    prefs = {(p["kind"], p["designer"]): p for p in res.report.model_dump(mode="json")["preferences"]}
    print("planted world preferences:", {k: (round(p["estimate"], 2), round(p["se"], 2)) for k, p in prefs.items()
                                         if k[1] == "selfish"})
    # against the out-of-family answerers: the own answerer has self + family (1.5 + 1.0), selfish-mini the family
    # bonus, the two together their mean (1.75)
    for kind, want in (("self", 2.5), ("family", 1.0), ("family_incl_self", 1.75)):
        p = prefs[(kind, "selfish")]
        assert p["detected"] and p["ci_low"] < want < p["ci_high"], (kind, p)
        assert p["estimate"] == pytest.approx(want, rel=0.3), (kind, p)
    assert prefs[("family", "selfish")]["answerers"] == ["selfish-mini"]
    for key in [("self", "ref"), ("self", "hard")]:
        assert not prefs[key]["detected"], prefs[key]
    m = res.report.model_dump(mode="json")["matrix"]
    assert m["cells"][m["designers"].index("selfish")][m["answerers"].index("selfish")] == "self"
    j = m["answerers"].index("selfish-mini")
    assert m["residual"][m["designers"].index("selfish")][j] > 0.05  # the family cell stands out in the residuals


@pytest.mark.slow
def test_a_judge_biased_for_a_designer_lowers_its_broken_rate_by_the_planted_share(planted):
    res, out = planted
    r = rows(res.report.model_dump(mode="json"))["favoured"]
    suite = [x for x in read_jsonl(out / "suite.jsonl") if x["designer"] == "favoured"]
    flawed = sum(x["metadata"]["sim"]["flaw"] != "none" for x in suite) / len(suite)
    # every gold-incorrect item reaches the judge (all strong models fail); half are called clean
    assert r["broken_rate"] == pytest.approx(0.5 * flawed, abs=0.07)
    lo, hi = r["intervals"]["broken_rate"]
    assert lo < r["broken_rate"] < hi


@pytest.mark.slow
def test_every_designer_metric_has_a_seeded_bootstrap_interval(planted):
    res, _ = planted
    for name, r in rows(res.report.model_dump(mode="json")).items():
        iv = r["intervals"]
        for key in ("broken_rate", "error_rate", "discrimination", "mean_tvd", "level_spearman"):
            assert key in iv, (name, key)
        lo, hi = iv["discrimination"]
        assert lo <= r["discrimination"]["mean"] <= hi, name


@pytest.mark.slow
def test_null_world_detects_nothing(null):
    prefs = null.report.model_dump(mode="json")["preferences"]
    assert {(p["kind"], p["designer"]) for p in prefs} == {("self", "ref"), ("self", "selfish"), ("self", "hard"),
                                                           ("family", "selfish"), ("family_incl_self", "selfish")}
    assert not any(p["detected"] for p in prefs), prefs
    assert all(abs(p["estimate"]) < 0.6 for p in prefs), prefs
    mus = [effect(null.report.model_dump(mode="json"), n)["mu"] for n in ("ref", "selfish", "hard")]
    assert max(mus) - min(mus) < 0.35, mus
    print("null world:", [(p["kind"], p["designer"], round(p["estimate"], 2), round(p["p_value"], 3)) for p in prefs],
          "mu", [round(m, 2) for m in mus])


@pytest.mark.slow
def test_breakdowns_by_level_intent_and_format(planted):
    res, _ = planted
    bd = rows(res.report.model_dump(mode="json"))["inverted"]["breakdown"]
    assert set(bd) == {"difficulty", "intent", "format", "position"}
    assert set(bd["difficulty"]) == {"L1", "L2", "L3", "L4", "L5"} and set(bd["format"]) == {"numeric", "short"}
    assert sum(v["n_suite"] for v in bd["intent"].values()) == rows(res.report.model_dump(mode="json"))["inverted"]["n_suite"]
    # inverted calibration: the L5 items are the easiest, the L1 items the hardest
    assert bd["difficulty"]["L5"]["mean_b"] < bd["difficulty"]["L1"]["mean_b"] - 1.0
    assert bd["difficulty"]["L5"]["error_rate"] < bd["difficulty"]["L1"]["error_rate"]
