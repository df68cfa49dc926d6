"""benchfill: a benchmark as an empirical measure over item difficulty.

The methods follow "Your Benchmark Is an Empirical Measure Over Difficulty" (2026: DDM, maximum gap, IRT
difficulty, BenchFill) and, for ``benchfill designers``, "BenchBench: Benchmarking Automated Benchmark Generation"
(arXiv 2603.20807); README.md says where benchfill departs from them (the learned difficulty population, decisions
by posterior probability) and why.

data -> importers -> irt -> diagnostics -> models / memory -> graphs -> designers -> api -> cli, checked by
``lint-imports`` (README: Architecture).
"""

import os as _os

# litellm fetches a cost map from the internet at import unless told to read its bundled copy.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchfill._version import __version__

# The Python API (benchfill.api), imported on first use so that `import benchfill` stays light.
__all__ = ["load_responses", "import_logs", "diagnose", "diagnosis_files", "suite", "place", "calibrate", "detect",
           "load_diagnosis", "fill", "fill_async", "fill_run", "evaluate", "evaluate_async", "trace", "export",
           "review_queue", "review_item", "vote", "write_report", "view", "designers_card", "designers_run",
           "designers_run_async", "designers_rewriters", "local_server", "Diagnosis", "ImportResult", "FillSummary",
           "__version__"]


def __getattr__(name: str):
    if name == "Diagnosis":
        from benchfill.diagnostics.report import Diagnosis

        return Diagnosis
    if name in __all__:
        from benchfill import api

        return getattr(api, name)
    raise AttributeError(f"module 'benchfill' has no attribute {name!r}")
