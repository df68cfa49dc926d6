"""The commands' options: one pydantic model per command, the one home of their defaults and of their rules.

Each API function (:mod:`benchfill.api`) takes its command's options as keywords whose defaults are its model's, and
builds the model, which checks them before anything is read or fitted; the CLI (:mod:`benchfill.cli`) takes its
flags' defaults from the same models and builds them from its flags, so the two cannot drift apart. A bad value is
one :class:`~benchfill.errors.InputError` line naming the option as the CLI spells it (``--chains: 0: must be at
least 1``).

Light on purpose (pydantic, no statistics): the CLI imports it to declare its flags.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from benchfill.errors import InputError, did_you_mean, require_sampler

DEFAULT_SAMPLER = "fast"  # the IRT sampler when none is named (irt.fit.SAMPLERS; the exact engine)
DEFAULT_PRIOR = "spline"  # the difficulties' population (irt.prior.DEFAULT_POPULATION; a test holds them equal)
DIAGNOSIS_GAPS = 10  # gaps a diagnosis records, largest first (the CLI's --top-gaps shows 5 of them by default)
DESIGNERS_IRT = ("map", "fast", "pymc", "nutpie")  # the joint scale's inference in `designers run`


class Options(BaseModel):
    """A command's options: frozen, no unknown field. Built from its values, it checks them: the rules of
    :meth:`check` on the values as given (before pydantic converts them), then their types; a bad one raises the
    :class:`~benchfill.errors.InputError` of its option."""

    # defer_build: validators are built on first use, not when the CLI imports this module to declare its flags
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _input_error(exc) from None

    @classmethod
    def defaults(cls) -> Self:
        """The defaults, unchecked (they are the model's own): what the API's keywords and the CLI's flags default
        to. A required option has none (reading it raises AttributeError)."""
        return cls.model_construct()

    def keywords(self) -> dict[str, Any]:
        """The options as the keyword arguments of the command's API function."""
        return dict(self)

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        """The rules on the values given (an option not given is not checked: its default holds); each broken one
        raises its option's InputError. None here: the types alone."""

    @model_validator(mode="before")
    @classmethod
    def _check_given(cls, values: Any) -> Any:
        if isinstance(values, dict):
            cls.check(values)
        return values


def _input_error(exc: ValidationError) -> InputError:
    """The first error of a model's validation as one InputError line: a rule's own, or pydantic's on a type
    (``--seed: 'x': input should be a valid integer, ...``)."""
    err = exc.errors()[0]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, InputError):
        return cause
    option = "--" + ".".join(str(part) for part in err["loc"]).replace("_", "-")
    if err["type"] == "missing":
        return InputError(option, "required")
    msg = str(err["msg"])
    return InputError(option, f"{err['input']!r}: {msg[:1].lower()}{msg[1:]}")


# ---- the IRT fit's rules (diagnose, suite, place, fill) --------------------------------------------------------


def check_fit_options(sampler: Any = "", *, chains: Any = None, tune: Any = None, draws: Any = None,
                      guessing: Any = None, choices: Any = None, top_gaps: Any = None,
                      robustness: bool = False) -> None:
    """The IRT fit's options, checked before any data is read or any fit starts (the options models of diagnose,
    suite, place and fill call it). Raises :class:`~benchfill.errors.InputError` naming the option as the CLI
    spells it (``--chains: 0: must be at least 1``), or :class:`~benchfill.errors.MissingExtra` for a sampler whose
    extra is not installed. ``sampler`` ``""`` is the default (``fast``); an option left None is not checked. The
    rules: a known sampler; ``chains``, ``draws``, ``top_gaps`` at least 1 and ``tune`` at least 0 (whole numbers);
    ``guessing`` in [0, 1); ``choices`` at least 2; not both ``guessing`` and ``choices``."""
    from benchfill.irt.fit import SAMPLERS, available_samplers

    if not isinstance(sampler, str):
        raise InputError("--sampler", f"{sampler!r}: a sampler is named by a string")
    require_sampler(sampler, robustness)
    known = available_samplers()
    if sampler and sampler not in known:
        if sampler.lower() in ("nuts", "hmc", "mcmc"):
            hint = " (NUTS is pymc, nutpie or numpyro)"
        else:
            hint = did_you_mean(sampler, known)
        missing = " (not installed here)" if sampler in SAMPLERS else ""
        raise InputError("--sampler", f"{sampler!r}{missing}: choose from {', '.join(known)}{hint}")
    for name, value, least in (("--chains", chains, 1), ("--draws", draws, 1), ("--tune", tune, 0),
                               ("--top-gaps", top_gaps, 1)):
        if value is not None and _whole(name, value) < least:
            raise InputError(name, f"{value}: must be at least {least}")
    if guessing is not None:
        try:
            rate = float(guessing)
        except (TypeError, ValueError):
            raise InputError("--guessing", f"{guessing!r}: a guessing rate is a number in [0, 1)") from None
        if not 0.0 <= rate < 1.0:
            raise InputError("--guessing", f"{rate:g}: a guessing rate must lie in [0, 1)")
    if choices is not None and _whole("--choices", choices) < 2:
        raise InputError("--choices", f"{choices}: multiple choice needs at least 2 options")
    if guessing is not None and choices is not None:
        raise InputError("--guessing/--choices", "give one of them, not both")


def _whole(name: str, value: Any) -> int:
    """``value`` as a whole number (an int, numpy's too; not a float or a bool), else the option's InputError."""
    try:
        if not isinstance(value, bool):
            return operator.index(value)
    except TypeError:
        pass
    raise InputError(name, f"{value!r}: must be a whole number")


def _check_prior(prior: Any) -> None:
    from benchfill.irt.prior import POPULATION_KINDS

    if prior not in POPULATION_KINDS:
        raise InputError("--prior", f"{prior!r}: choose from {', '.join(POPULATION_KINDS)}")


class FitOptions(Options):
    """The IRT fit's options, shared by ``diagnose`` and ``suite``: the sampler and its settings, the items' guessing
    from multiple choice, the difficulties' prior."""

    FIT_RULES: ClassVar[tuple[str, ...]] = ("sampler", "chains", "tune", "draws", "choices")

    sampler: str = DEFAULT_SAMPLER
    chains: int = 4
    tune: int = 1000
    draws: int = 1000
    seed: int = 0
    choices: int | None = None
    prior: str = DEFAULT_PRIOR
    compare_guessing: bool = True

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        check_fit_options(**{name: values[name] for name in cls.FIT_RULES if name in values})
        if "prior" in values:
            _check_prior(values["prior"])


class DiagnoseOptions(FitOptions):
    """``diagnose``'s options (:func:`benchfill.api.diagnose`; where it writes: :class:`DiagnosisOutput`)."""

    FIT_RULES: ClassVar[tuple[str, ...]] = FitOptions.FIT_RULES + ("guessing", "top_gaps", "robustness")

    guessing: float | None = None
    robustness: bool = False
    top_gaps: int = DIAGNOSIS_GAPS


class SuiteOptions(FitOptions):
    """``suite``'s options (:func:`benchfill.api.suite`): the fit's, and the column naming each item's benchmark."""

    by: str = "benchmark"

    def diagnosis(self) -> DiagnoseOptions:
        """What each benchmark's diagnosis gets: the suite's fit options, diagnose's defaults for the rest."""
        return DiagnoseOptions(**{name: getattr(self, name) for name in FitOptions.model_fields})


class DiagnosisOutput(Options):
    """Where ``diagnose`` writes and how many gaps it shows (``--json``, ``--png``, ``--force``, ``--top-gaps``;
    :func:`benchfill.api.diagnosis_files` applies them). ``json_out``: the JSON's path, a folder (an existing one,
    or a path ending in ``/``) to write it into, ``"-"`` for standard output, or None for the default folder
    ``runs/<name>/``; ``force``: replace a diagnosis in the default folder; ``n_gaps``: gaps the table shows and the
    picture shades."""

    json_out: str | Path | None = None
    png: Path | None = None
    force: bool = False
    n_gaps: int = 5

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        if "n_gaps" in values:
            check_fit_options(top_gaps=values["n_gaps"])


class PlaceOptions(Options):
    """``place``'s options (:func:`benchfill.api.place`): the new items' lower asymptote (None: the scale's)."""

    guessing: float | None = None

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        if "guessing" in values:
            check_fit_options(guessing=values["guessing"])


def parse_target(spec: Any) -> tuple[float, float] | None:
    """A calibration target as written: ``"uniform"`` -> None (U[0, 1]); ``"beta:A,B"`` -> (A, B), both positive."""
    if spec == "uniform":
        return None
    if isinstance(spec, str) and spec.startswith("beta:"):
        try:
            a, b = (float(x) for x in spec[5:].split(","))
        except ValueError:
            raise InputError("--target", f"{spec!r}: expected beta:A,B with positive numbers") from None
        if a <= 0 or b <= 0:
            raise InputError("--target", f"{spec!r}: Beta parameters must be positive")
        return a, b
    raise InputError("--target", f"{spec!r}: expected 'uniform' or 'beta:A,B'{did_you_mean(spec, ['uniform'])}")


class CalibrateOptions(Options):
    """``calibrate``'s options (:func:`benchfill.api.calibrate`): ``k`` items to keep (required) and the target
    distribution, ``"uniform"`` or ``"beta:A,B"`` on [0, 1]."""

    k: int
    target: str = "uniform"

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        if "target" in values:
            parse_target(values["target"])


class DetectOptions(Options):
    """``detect``'s options (:func:`benchfill.api.detect`): which models (when a file holds several), an item-id
    list to restrict to, the permutations, their seed and the test level (checked by the test itself)."""

    model_a: str | None = None
    model_b: str | None = None
    items: Path | None = None
    permutations: int = 100_000  # the paper's (diagnostics.detect.DEFAULT_PERMUTATIONS; a test holds them equal)
    seed: int | None = 0
    alpha: float = 0.05


class EvaluateOptions(Options):
    """``evaluate``'s options (:func:`benchfill.api.evaluate`): only the first ``limit`` items; ``rollouts`` for
    every panel model instead of its own (each at least 1, checked with the files they apply to)."""

    limit: int | None = None
    rollouts: int | None = None


class FillOptions(Options):
    """``fill``'s options (:func:`benchfill.api.fill`): the models kept for the scale, the gaps to fill, the fit's
    sampler (``""``: the default) and seed, the baseline beside it, resuming, and gaps at the design's floor."""

    models: int | None = 12
    models_file: Path | None = None
    gaps: int = 3
    sampler: str = ""
    seed: int = 0
    compare: bool = False
    resume: bool = False
    allow_floor_gaps: bool = False

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        if "sampler" in values:
            check_fit_options(values["sampler"])


class DesignersRunOptions(Options):
    """``designers run``'s options (:func:`benchfill.api.designers_run`): the seed benchmark's answers or items,
    how many seed items to answer, the joint scale's inference (None: the config's)."""

    seed_responses: Path | None = None
    seed_items: Path | None = None
    seed_limit: int | None = None
    irt: str | None = None

    @classmethod
    def check(cls, values: dict[str, Any]) -> None:
        irt = values.get("irt")
        if irt is not None and irt not in DESIGNERS_IRT:
            raise InputError("--irt", f"{irt!r}: choose {', '.join(DESIGNERS_IRT[:-1])} or {DESIGNERS_IRT[-1]}")
        limit = values.get("seed_limit")
        if limit is not None and _whole("--seed-limit", limit) < 1:
            raise InputError("--seed-limit", f"{limit}: must be at least 1")


# ---- each command's defaults: what the API's keywords and the CLI's flags default to -------------------------

FIT = FitOptions.defaults()
DIAGNOSE = DiagnoseOptions.defaults()
DIAGNOSIS_OUTPUT = DiagnosisOutput.defaults()
SUITE = SuiteOptions.defaults()
PLACE = PlaceOptions.defaults()
CALIBRATE = CalibrateOptions.defaults()
DETECT = DetectOptions.defaults()
EVALUATE = EvaluateOptions.defaults()
FILL = FillOptions.defaults()
DESIGNERS_RUN = DesignersRunOptions.defaults()
