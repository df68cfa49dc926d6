"""The whole designer evaluation in the simulated world: planted properties are recovered, and a rerun is free.

One module-scoped run: three designers x 300 items, six answerers. Planted: 10 % broken items for every designer
(all six flaw kinds), a self-preference bonus (+1.5 logits for its own answerer) for ``selfish`` only, no family
bonus anywhere. About 15 s on 2 cores (most of it the panel's ~5,000 cached calls and the MAP IRT fit).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from benchfill.designers.card import Category, DomainCard, save_card
from benchfill.designers.pipeline import read_jsonl, run_designers

ABILITIES = {"plain": 1.6, "selfish": 0.9, "third": 0.3, "selfish-mini": -0.4, "x1": -1.1, "x2": -1.9}
FAMILIES = {"plain": "P", "selfish": "S", "third": "T", "selfish-mini": "S", "x1": "X", "x2": "Y"}

CONFIG = """
seed = 0
[defaults]
rollouts = 1
[run]
batch_size = 20
bootstrap = 500
[sim]
seed = 7
[sim.abilities]
{abilities}
[sim.designers.plain]
broken_rate = 0.10
[sim.designers.selfish]
broken_rate = 0.10
self_bonus = 1.5
[sim.designers.third]
broken_rate = 0.10
[judge]
model = "sim/judge"
{designers}
{panel}
"""


def write_inputs(folder: Path, total: int = 300) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = CONFIG.format(
        abilities="\n".join(f'"{k}" = {v}' for k, v in ABILITIES.items()),
        designers="\n".join(f'[[designers]]\nmodel = "sim/{d}"\nname = "{d}"\nfamily = "{FAMILIES[d]}"'
                            for d in ("plain", "selfish", "third")),
        panel="\n".join(f'[[panel]]\nmodel = "sim/{a}"\nname = "{a}"\nfamily = "{FAMILIES[a]}"' for a in ABILITIES),
    )
    (folder / "cfg.toml").write_text(cfg)
    (folder / "q.yaml").write_text(f"total: {total}\nsuper_categories: from_card\n"
                                   "formats: {mcq: 0.4, numeric: 0.4, short: 0.2}\n")
    save_card(DomainCard(name="toy", source="no-such-file.jsonl", n_items=30, modality="text", language="en",
                         formats={"numeric": 30},
                         ontology=[Category(name=n, count=10, share=1 / 3) for n in ("Arithmetic", "Geometry", "Logic")]),
              folder / "card.yaml")
    # seed-benchmark accuracies that rank the answerers by ability
    rows = ["model,item_id,n_correct,n_trials"]
    for m, t in ABILITIES.items():
        rows += [f"{m},s1,{round(200 / (1 + math.exp(-t)))},200", f"{m},s2,{round(200 / (1 + math.exp(0.5 - t)))},200"]
    (folder / "seed.csv").write_text("\n".join(rows) + "\n")
    return {"card": folder / "card.yaml", "quotas": folder / "q.yaml", "config": folder / "cfg.toml",
            "seed": folder / "seed.csv"}


def run(paths: dict[str, Path], out: Path):
    return run_designers(paths["card"], paths["quotas"], paths["config"], out, seed_responses=paths["seed"])


@pytest.fixture(scope="module")
def stat_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("designers")
    paths = write_inputs(folder)
    res = run(paths, folder / "out")
    return paths, folder / "out", res


def by_designer(report):
    return {row["designer"]: row for row in report["designers"]}


@pytest.mark.slow
def test_planted_broken_rate_is_recovered(stat_run):
    _, out, res = stat_run
    rows = by_designer(res.report.model_dump(mode="json"))
    records = read_jsonl(out / "suite.jsonl")
    for name in ("plain", "selfish", "third"):
        row = rows[name]
        suite = [r for r in records if r["designer"] == name and r["status"] not in ("duplicate", "failed")]
        assert len(suite) == row["n_suite"] >= 300
        realized = sum(r["metadata"].get("sim", {}).get("flaw", "none") != "none" for r in suite) / len(suite)
        # the pipeline finds what was planted in this realisation (an ambiguous item can slip through when the
        # strong models happen to agree), and the realisation is close to the nominal 10 %
        assert abs(row["broken_rate"] - realized) <= 0.015, (name, row["broken_rate"], realized)
        assert abs(row["broken_rate"] - 0.10) <= 0.03, (name, row["broken_rate"])
        # top-up rounds refill the statically broken slots: a slot stays empty only when its item is broken in all
        # three rounds (~0.3 % of slots at this broken rate; the realisation depends on the prompt's text)
        assert row["slot_coverage"] >= 0.99
        assert row["mean_tvd"] < 0.05  # the simulated designers follow the spec
    assert res.report.model_dump(mode="json")["simulated"] and "SIMULATED" in res.report.model_dump(mode="json")["label"]


@pytest.mark.slow
def test_planted_self_preference_is_detected_and_nothing_else(stat_run):
    _, _, res = stat_run
    prefs = {(p["kind"], p["designer"]): p for p in res.report.model_dump(mode="json")["preferences"]}
    assert set(prefs) == {("self", "plain"), ("self", "selfish"), ("self", "third"), ("family", "selfish"),
                          ("family_incl_self", "selfish")}
    assert prefs[("self", "selfish")]["detected"] and prefs[("self", "selfish")]["estimate"] > 0.08
    # the family row is selfish-mini alone (no bonus planted); the combined row carries the own answerer's bonus
    assert prefs[("family", "selfish")]["answerers"] == ["selfish-mini"]
    assert prefs[("family_incl_self", "selfish")]["estimate"] > 0
    for key in [("self", "plain"), ("self", "third"), ("family", "selfish")]:
        assert not prefs[key]["detected"], (key, prefs[key])


@pytest.mark.slow
def test_ranking_is_preserved_by_unbiased_suites(stat_run):
    _, _, res = stat_run
    rows = by_designer(res.report.model_dump(mode="json"))
    assert rows["plain"]["ranking"]["r"] >= 0.85 and rows["third"]["ranking"]["r"] >= 0.85
    assert rows["plain"]["ranking"]["n"] == 6
    # the self-preferring suite lifts its own model above a stronger one
    assert rows["selfish"]["ranking"]["r"] < rows["plain"]["ranking"]["r"]
    # the joint IRT scale orders the answerers like their planted abilities
    theta = res.report.model_dump(mode="json")["irt"]["theta"]
    assert theta["plain"] > theta["third"] > theta["selfish-mini"] > theta["x2"]
    m = res.report.model_dump(mode="json")["matrix"]
    assert m["designers"] == ["plain", "selfish", "third"] and len(m["accuracy"][0]) == 6
    assert (out_png := Path(res.out) / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out_png


@pytest.mark.slow
def test_rerun_and_resume_make_zero_model_calls(stat_run, tmp_path):
    paths, out, first = stat_run
    assert first.usage.calls_made > 5000
    again = run(paths, out)
    assert again.usage.calls_made == 0 and again.usage.cached == 0
    assert again.skipped_stages == ["plan", "generate", "seed", "answer", "judge", "report"]
    assert again.report.model_dump(mode="json") == json.loads((out / "report.json").read_text())
    # a copy with later stages lost (a crash before they were written): recomputed from the cache alone
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("answers.jsonl", "verdicts.jsonl", "report.json"):
        (copy / name).unlink()
    resumed = run(paths, copy)
    assert resumed.usage.calls_made == 0 and resumed.usage.cached > 5000
    assert resumed.skipped_stages == ["plan", "generate", "seed"]
    assert by_designer(resumed.report.model_dump(mode="json"))["plain"]["broken_rate"] == by_designer(first.report.model_dump(mode="json"))["plain"]["broken_rate"]
    assert resumed.report.model_dump(mode="json")["preferences"] == first.report.model_dump(mode="json")["preferences"]


@pytest.mark.slow
def test_self_ranking_finds_the_suite_that_ranks_its_creator_first(stat_run):
    _, _, res = stat_run
    rows = by_designer(res.report.model_dump(mode="json"))
    # selfish's model is second on the seed (0.9 vs plain's 1.6); +1.5 logits on its own items puts it first there
    sr = rows["selfish"]["self_ranking"]
    assert (sr["rank"], sr["seed_rank"], sr["reference"], sr["gain"]) == (1.0, 2.0, "seed", 1.0)
    assert sr["rank_ci"][0] == 1.0 and sr["gain_ci"][1] == 1.0 and sr["n_tests"] == 3
    # near the ceiling (88 % vs 83 % correct, one rollout) a rank moves little: seen p 0.046, not detected after
    # Bonferroni, where the logit self row (+1.5) is; the rank is the coarser test
    assert sr["p_value"] < 0.1
    for name in ("plain", "third"):
        r = rows[name]["self_ranking"]
        assert r["rank"] == r["seed_rank"] and not r["detected"], (name, r)
