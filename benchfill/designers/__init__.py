"""Designer evaluation (benchfill/designers/README.md, BenchBench): LLMs as benchmark designers.

Stage 1 :mod:`~benchfill.designers.card` (domain card), stage 2 :mod:`~benchfill.designers.quotas` +
:mod:`~benchfill.designers.generate` (quota-controlled suites), stage 3 :mod:`~benchfill.designers.validate`
(panel answers, static / dynamic checks, item-quality judge), :mod:`~benchfill.designers.metrics` (pure metrics),
:mod:`~benchfill.designers.joint` (the joint item-level IRT fit with designer-level effects and logit
interactions), :mod:`~benchfill.designers.report` (leaderboard, heatmap), :mod:`~benchfill.designers.pipeline`
(the resumable run), :mod:`~benchfill.designers.rewriters` (BenchFill rewriters scored like designers),
:mod:`~benchfill.designers.results` (the typed results: pydantic, ``model_dump`` / ``model_dump_json``) and
:mod:`~benchfill.designers.sim` (the simulated designers, answerers and judge). See README.md here.

The names below are imported lazily, so ``benchfill --help`` does not pay for numpy / scipy / pymc.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DomainCard": "card", "build_card": "card", "extract_card": "card", "load_card": "card", "save_card": "card",
    "DesignersConfig": "config", "load_designers_config": "config",
    "JointFit": "joint", "fit_joint": "joint",
    "run_designers": "pipeline", "run_designers_async": "pipeline",
    "DesignersReport": "results", "DesignersRun": "results", "DesignerRow": "results", "RewriterReport": "results",
    "Plan": "quotas", "QuotaSpec": "quotas", "largest_remainder": "quotas", "load_quotas": "quotas",
    "make_plan": "quotas", "quota_warnings": "quotas",
    "rewriter_report": "rewriters",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"benchfill.designers.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'benchfill.designers' has no attribute {name!r}")
