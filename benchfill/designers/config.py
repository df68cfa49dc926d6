"""The designer-evaluation config: who designs, who answers, who judges, and the run's options (TOML or YAML).

It reuses the models layer's :class:`~benchfill.models.config.ModelConfig` for every role and adds what this
evaluation needs on top:

- ``[[designers]]``: the models that write suites; each has an explicit ``family`` (self / family preference is
  computed from these families only, never from name prefixes) and optionally ``answerer = "<panel name>"``, the
  panel entry that is the same model (default: the panel entry with the same name or the same model string).
- ``[[panel]]``: the answerers, each with a ``family`` and optionally ``strong = true`` (the "strong models" of the
  dynamic checks; default: the top third of the panel by accuracy on the generated items, at least two).
- ``[judge]``: the item-quality judge (clean / not well posed / gold incorrect / ambiguous).
- ``[grader]``: optional rubric judge for open-format answers (objective formats never reach it).
- ``[card]``: optional model that labels seed items for the domain card (``benchfill designers card``).
- ``[run]``: options of the pipeline (:class:`RunOptions`).
- ``[sim]``: the simulated world (``sim/...`` models), with planted designer properties under
  ``[sim.designers.<name>]`` (:class:`SimDesignerConfig`).

Every problem becomes one :class:`~benchfill.errors.InputError` naming the file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchfill.errors import InputError, from_validation_error
from benchfill.models.config import ModelConfig, SimConfig, _read_mapping, _reject_inline_keys, validate_model

FLAWS = ("missing_answer", "bad_options", "gold_not_in_options", "gold_incorrect", "ambiguous", "not_well_posed")


class FamilyModel(ModelConfig):
    """A model with an explicit family (a designer or an answerer)."""

    family: str

    @field_validator("family")
    @classmethod
    def _family_nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("family is empty")
        return v


class Designer(FamilyModel):
    """A designer model. ``answerer``: the panel name of the same model (for self-preference)."""

    answerer: str | None = None


class Answerer(FamilyModel):
    """An answerer (panel) model. ``strong``: counts as a strong model in the dynamic checks."""

    strong: bool | None = None


class SimDesignerConfig(BaseModel):
    """Planted properties of one simulated designer ``sim/<name>`` (``[sim.designers.<name>]``).

    Attributes:
        broken_rate: share of items written with a flaw (static or only visible to the panel / judge).
        flaw_mix: relative weights of the flaw kinds (``FLAWS``); normalised.
        difficulty_shift: added to every item's latent difficulty b (logits): the designer's difficulty skew.
        level_slope: b grows by this much per requested level step (L3 is the centre).
        difficulty_noise: SD of b around shift + slope (level - 3).
        noise_rate: share of items answered at chance whatever the ability (low discrimination).
        family_bonus: logit bonus of every answerer of the designer's family on its items, its own answerer
            included (family preference).
        self_bonus: logit bonus of the designer's own answerer on its items, on top of ``family_bonus`` (self
            preference; the report's ``self`` row, against the out-of-family answerers, estimates the sum).
        duplicate_rate: share of items that repeat the previous stem of the batch.
        malformed_rate: share of replies that are not JSON at all.
        off_spec_rate: share of items written to a random other spec (category / format / level / intent).
        mislabel_rate: share of items written at a random level (uniform L1-L5) while declaring the requested one
            (the calibration slope shrinks by this share).
        item_slope: the 2PL discrimination a of its items: P = c + (1 - c) sigmoid(a (theta + bonus - b)).
        negative_rate: share of items with slope -a (the stronger answerers do worse: negative discrimination).
        judge_favour: share of this designer's flawed items that reach the judge and are called clean (a judge
            biased toward this designer); ``judge_harshness``: share of its clean items that reach the judge and
            are called ``not_well_posed``.
        order_decay: generation-order degradation: the broken rate rises linearly from ``broken_rate`` for the
            first item of a reply to ``broken_rate + order_decay`` for the last (capped at 1).
        multi_answer_rate: share of ``mcq_multi`` items with several keyed options (the rest key one);
            ``partial_rate``: share of a wrong answer to a multi-answer item that is a near miss (a strict subset or
            superset of the keyed options, which set matching counts wrong).
    """

    model_config = ConfigDict(extra="forbid")

    broken_rate: float = Field(default=0.05, ge=0, le=1)
    flaw_mix: dict[str, float] = Field(default_factory=lambda: {
        "missing_answer": 1.0, "bad_options": 1.0, "gold_not_in_options": 1.0, "gold_incorrect": 1.0,
        "ambiguous": 1.0, "not_well_posed": 1.0})
    difficulty_shift: float = 0.0
    level_slope: float = 0.6  # < 0: inverted calibration (L5 items are the easiest)
    difficulty_noise: float = Field(default=0.5, ge=0)
    noise_rate: float = Field(default=0.0, ge=0, le=1)
    family_bonus: float = 0.0
    self_bonus: float = 0.0
    duplicate_rate: float = Field(default=0.0, ge=0, le=1)
    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    off_spec_rate: float = Field(default=0.0, ge=0, le=1)
    mislabel_rate: float = Field(default=0.0, ge=0, le=1)
    item_slope: float = Field(default=1.0, gt=0)
    negative_rate: float = Field(default=0.0, ge=0, le=1)
    judge_favour: float = Field(default=0.0, ge=0, le=1)
    judge_harshness: float = Field(default=0.0, ge=0, le=1)
    order_decay: float = Field(default=0.0, ge=-1, le=1)
    multi_answer_rate: float = Field(default=0.8, ge=0, le=1)
    partial_rate: float = Field(default=0.7, ge=0, le=1)

    @field_validator("flaw_mix")
    @classmethod
    def _known_flaws(cls, v: dict[str, float]) -> dict[str, float]:
        for key, w in v.items():
            if key not in FLAWS:
                raise ValueError(f"unknown flaw {key!r} (known: {', '.join(FLAWS)})")
            if w < 0:
                raise ValueError(f"flaw weight {key} is negative")
        if v and sum(v.values()) <= 0:
            raise ValueError("flaw weights sum to 0")
        return v


class DesignerSimConfig(SimConfig):
    """The ``[sim]`` section: the models layer's simulated world plus planted designers and a judge error rate."""

    designers: dict[str, SimDesignerConfig] = Field(default_factory=dict)
    judge_error_rate: float = Field(default=0.0, ge=0, le=1)


class RunOptions(BaseModel):
    """``[run]``: how the pipeline runs (all optional).

    Attributes:
        batch_size: item specifications per designer call.
        max_topup_rounds: extra rounds that re-request slots left without a usable item.
        n_options: options every multiple-choice item must have.
        near_duplicate: character 5-gram Jaccard at or above which two stems are near duplicates.
        min_answers: gradable answers an item needs before the dynamic checks apply (fewer -> sent to the judge).
        ceiling, floor: an item answered correctly by more than ``ceiling`` or fewer than ``floor`` of its
            answers is sent to the judge.
        irt: IRT inference for the joint difficulty scale: ``map`` (default, seconds), ``fast`` or ``pymc``.
        bootstrap: item-bootstrap replicates for the preference intervals.
        alpha: family-wise level of the preference tests (Bonferroni over all tests of a run).
        seed_limit: seed items the panel answers when no ``--seed-responses`` is given (None: all).
        max_reasks: re-asks when a designer's or the judge's reply is not usable JSON.
    """

    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(default=10, ge=1, le=100)
    max_topup_rounds: int = Field(default=2, ge=0, le=10)
    n_options: int = Field(default=4, ge=2, le=26)
    near_duplicate: float = Field(default=0.9, gt=0, le=1)
    min_answers: int = Field(default=3, ge=1)
    ceiling: float = Field(default=0.95, gt=0, le=1)
    floor: float = Field(default=0.05, ge=0, lt=1)
    irt: Literal["map", "fast", "pymc", "nutpie"] = "map"
    bootstrap: int = Field(default=1000, ge=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    seed_limit: int | None = Field(default=None, ge=1)
    max_reasks: int = Field(default=2, ge=0, le=5)


class DesignersConfig(BaseModel):
    """A designer-evaluation run config (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    designers: list[Designer] = Field(min_length=1)
    panel: list[Answerer] = Field(min_length=2)
    judge: ModelConfig
    grader: ModelConfig | None = None
    card: ModelConfig | None = None
    prompts: dict[str, str] = Field(default_factory=dict)
    sim: DesignerSimConfig | None = None
    run: RunOptions = Field(default_factory=RunOptions)
    seed: int = 0
    source: str = "<memory>"

    @model_validator(mode="before")
    @classmethod
    def _apply_defaults(cls, data: Any) -> Any:
        from benchfill.models.config import apply_role_defaults

        return apply_role_defaults(data, ("judge", "grader", "card"), ("designers", "panel"))

    @model_validator(mode="after")
    def _check(self) -> "DesignersConfig":
        for role, models in (("designers", self.designers), ("panel", self.panel)):
            seen: set[str] = set()
            for k, cfg in enumerate(models):
                if cfg.label in seen:
                    raise ValueError(f"{role}[{k}]: duplicate name {cfg.label!r} (set a distinct 'name')")
                seen.add(cfg.label)
        labels = {a.label for a in self.panel}
        for k, d in enumerate(self.designers):
            if d.answerer is not None and d.answerer not in labels:
                raise ValueError(f"designers[{k}].answerer: {d.answerer!r} is not a panel name")
        return self

    # ---------------------------------------------------------------------------------------------- helpers

    def roles(self) -> Iterator[tuple[str, ModelConfig]]:
        for role in ("judge", "grader", "card"):
            cfg = getattr(self, role)
            if cfg is not None:
                yield role, cfg
        for k, cfg in enumerate(self.designers):
            yield f"designers[{k}]", cfg
        for k, cfg in enumerate(self.panel):
            yield f"panel[{k}]", cfg

    @property
    def simulated(self) -> bool:
        return any(cfg.is_simulated for _, cfg in self.roles())

    def answerer_of(self, designer: Designer) -> Answerer | None:
        """The panel entry that is the same model as ``designer``: its explicit ``answerer``, else the entry with the
        same name, else the one with the same model string and sampling parameters' model. None when absent."""
        if designer.answerer is not None:
            return next(a for a in self.panel if a.label == designer.answerer)
        for a in self.panel:
            if a.label == designer.label:
                return a
        for a in self.panel:
            if a.model == designer.model:
                return a
        return None

    def prompt_overrides(self) -> tuple[Path | None, dict[str, Path]]:
        """(override folder, {template: file}) resolved against the config file, as the models layer does."""
        from benchfill.models.config import resolve_prompt_overrides

        return resolve_prompt_overrides(self.prompts, self.source)

    def prompt_library(self):
        from benchfill.models.prompts import PromptLibrary

        folder, files = self.prompt_overrides()
        lib = PromptLibrary(folder, files, source=self.source)
        lib.check()
        return lib


def designers_config_from_dict(data: dict[str, Any], source: str = "<memory>") -> DesignersConfig:
    """Build a :class:`DesignersConfig` from a mapping; every problem -> one InputError naming the field."""
    try:
        return DesignersConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None


def load_designers_config(path: str | Path) -> DesignersConfig:
    """Read a designer-evaluation config (TOML or YAML)."""
    path = Path(path)
    data = _read_mapping(path)
    for role in ("designers", "panel", "judge", "grader", "card", "defaults"):
        if role in data:
            _reject_inline_keys(path, data[role], role)
    return designers_config_from_dict(data, source=str(path))


def validate_designers_config(cfg: DesignersConfig) -> None:
    """Every role can be called (provider known, key present) before any call is made."""
    for where, model in cfg.roles():
        validate_model(model, where, cfg.source, cfg.sim)
    if cfg.sim is not None:
        for k, d in enumerate(cfg.designers):
            name = d.model.removeprefix("sim/")
            if d.is_simulated and name not in cfg.sim.designers:
                raise InputError(cfg.source, f"designers[{k}].model: simulated designer {d.model!r} has no "
                                             f"[sim.designers.{name}] section")
    elif any(d.is_simulated for d in cfg.designers):
        raise InputError(cfg.source, "sim: simulated designers need a [sim] section")
