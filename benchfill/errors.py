"""The one error type that user-facing commands turn into a single clear line and exit code 2 (and its case of a
missing optional extra, with the table of the extras)."""

from __future__ import annotations

import difflib
from typing import Any, Iterable


class InputError(ValueError):
    """Bad user input: names the file, the row (1-based, header = row 1) and the rule broken.

    The CLI prints ``str(err)`` as one line and exits with code 2; nothing is written.
    """

    def __init__(self, path: str, rule: str, row: int | None = None) -> None:
        self.path = str(path)
        self.rule = rule
        self.row = row
        where = f"{self.path}: row {row}" if row is not None else self.path
        super().__init__(f"{where}: {rule}")


def did_you_mean(word: str, choices: Iterable[Any]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' (the tail of an InputError's rule)."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_path(loc: tuple[Any, ...], top: str = "<top level>") -> str:
    """A pydantic error location as the user wrote it: ``panel[3].temperature``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or top


def from_validation_error(source: str, exc: Any, top: str = "<top level>") -> InputError:
    """The first error of a pydantic ``ValidationError`` as one InputError line: ``field: what is wrong``."""
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return InputError(str(source), f"{field_path(tuple(err.get('loc', ())), top)}: {msg}")


# ---- optional extras ------------------------------------------------------------------------------------------

# pyproject's optional extras by the top-level modules of each that benchfill imports (the core install runs
# diagnose, suite, place, calibrate, detect and import without any of them; import reads Parquet with [parquet]):
# a command that meets a missing one says so in one line, with the pip command (MissingExtra; the CLI also maps a
# ModuleNotFoundError of these).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "llm": ("litellm", "langgraph", "math_verify", "latex2sympy2_extended", "sympy", "tenacity", "httpx",
            "sqlite_utils"),
    "pymc": ("pymc", "pytensor", "arviz", "nutpie"),
    "numpyro": ("numpyro", "jax", "pymc", "pytensor", "arviz"),
    "parquet": ("pyarrow",),
    "hf": ("datasets",),
    "vllm": ("vllm",),
}
EXTRA_NAMES = {"llm": "LLM", "pymc": "PyMC", "numpyro": "NumPyro", "parquet": "Parquet", "hf": "Hugging Face datasets",
               "vllm": "vLLM"}
# the IRT samplers (benchfill.irt.fit.SAMPLERS) that run on an extra; "fast", the default, is the core's own engine
SAMPLER_EXTRA = {"pymc": "pymc", "nutpie": "pymc", "map": "pymc", "numpyro": "numpyro"}


def install_hint(extra: str) -> str:
    """``pip install 'benchfill[extra]'``: the one spelling of the command every missing-extra message gives."""
    return f"pip install 'benchfill[{extra}]'"


class MissingExtra(InputError):
    """What the user asked for (``what``: a command or an option) needs an optional extra that is not installed:
    ``benchfill fill: needs the LLM extra (langgraph is not installed): pip install 'benchfill[llm]'``."""

    def __init__(self, what: str, extra: str, module: str | None = None) -> None:
        self.extra = extra
        self.module = module
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(what, f"needs the {EXTRA_NAMES.get(extra, extra)} extra{missing}: {install_hint(extra)}")


def extra_of(module: str | None) -> str | None:
    """The extra that brings ``module`` (a dotted name is looked up by its top level), or None."""
    top = (module or "").split(".")[0]
    return next((extra for extra, mods in EXTRA_MODULES.items() if top in mods), None)


def missing_module(extra: str) -> str | None:
    """The first module of ``extra`` that cannot be imported here (None: the extra is installed); imports none."""
    import importlib.util

    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked install counts as missing
            found = False
        if not found:
            return module
    return None


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` is importable; imports none of them."""
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(what, extra, module)


def require_sampler(sampler: str, robustness: bool = False, *, what: str | None = None) -> None:
    """One :class:`MissingExtra` line, before any data is read, when the sampler (or the robustness refits' MAP
    1PL vs 2PL comparison) runs on an optional extra that is not installed; ``what`` names the option as the
    user set it (default ``--sampler NAME``)."""
    if sampler in SAMPLER_EXTRA:
        require_extra(SAMPLER_EXTRA[sampler], what or f"--sampler {sampler}")
    if robustness:
        require_extra(SAMPLER_EXTRA["map"], "--robustness")
