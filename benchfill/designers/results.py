"""Typed results of designer evaluation (pydantic): ``model_dump`` / ``model_dump_json`` is the one serialisation.

- :class:`DesignersReport` is ``report.json`` (and ``benchfill designers run --json``): the card, the quota plan,
  one :class:`DesignerRow` per designer (leaderboard metrics with intervals, calibration, breakdowns by level /
  intent / format / place in the reply, generation-order degradation), the designer x answerer matrix, the
  preference tests and the across-designer correlations. A simulated run dumps a ``label`` saying so first.
- :class:`DesignersRun` is what :func:`benchfill.designers.pipeline.run_designers` returns: the report, the stages
  reused from an earlier run and the call usage.
- :class:`RewriterReport` is ``benchfill designers rewriters --json``.

Nested blocks whose keys are data (axis labels, level names, answerer names) are typed as mappings of those keys.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

SIM_NOTE = "SIMULATED: designers, answerers and judge are the offline simulated world, not real models"
REWRITER_SIM_NOTE = "SIMULATED: at least one run used the offline simulated world"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AccuracyDiD(_Result):
    """The accuracy-scale difference in differences (a share; biased by difficulty and ability: not the test)."""

    estimate: float | None
    ci_low: float | None
    ci_high: float | None


class PreferenceTest(_Result):
    """One self / family preference test on the logit scale (item-level interaction, adjusted for answerer ability
    and item difficulty): ``estimate`` in logits, normal (1 - alpha) interval, two-sided p, ``detected`` = p below
    alpha / ``n_tests`` (Bonferroni over the run's tests, every kind counted).

    ``kind`` (each against the answerers outside the designer's family, on the designer's items): ``self`` = its
    own answerer; ``family`` = its family's OTHER answerers (own excluded); ``family_incl_self`` = both, the
    answer-weighted mean of the two (:func:`benchfill.designers.metrics.preference_tests_logit`)."""

    kind: Literal["self", "family", "family_incl_self"]
    designer: str
    family: str
    answerers: list[str]
    controls: list[str]
    estimate: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    detected: bool
    n_tests: int = 1
    scale: Literal["logit"] = "logit"
    accuracy_did: AccuracyDiD | None = None


class SelfRanking(_Result):
    """The self-ranking test (:class:`benchfill.designers.metrics.SelfRanking`): the rank (1 = best) of a designer's
    own answerer among the panel on its suite (accuracy, item-bootstrap ``rank_ci``), on the seed benchmark, by the
    joint fit's ability and on the other designers' suites; ``gain`` = reference rank - rank (> 0: the suite lifts
    its creator) with ``gain_ci``, a one-sided bootstrap ``p_value`` and ``detected`` (Bonferroni over the
    designers tested)."""

    designer: str
    answerer: str
    n_items: int
    n_answerers: int
    rank: float | None
    rank_ci: list[float | None]
    seed_rank: float | None
    ability_rank: float | None
    others_rank: float | None
    reference: Literal["seed", "ability"] | None
    gain: float | None
    gain_ci: list[float | None]
    p_value: float | None
    detected: bool
    n_tests: int = 1


class ThirdRate(_Result):
    n: int
    broken_rate: float | None


class GenerationOrder(_Result):
    """Generation-order degradation (:func:`benchfill.designers.metrics.order_effect`): ``slope`` = change of the
    broken rate from the first to the last item of a reply (a share; > 0 = quality falls), its bootstrap ``ci``,
    a permutation ``p_value``, and the broken rate per third of the replies; ``detected`` = p below alpha /
    ``n_tests`` (Bonferroni over the run's designers)."""

    n: int
    slope: float | None
    ci: list[float | None]
    p_value: float | None
    by_third: dict[str, ThirdRate]
    basis: str
    detected: bool = False
    n_tests: int = 1


class BreakdownCell(_Result):
    """One group of a designer's suite: suite and core items, broken rate, error rate (1 - mean correct) and mean
    IRT b of its core items on the joint scale."""

    n_suite: int
    n_core: int
    broken_rate: float | None
    error_rate: float | None
    mean_b: float | None


class Ability(_Result):
    value: float | None
    basis: str


class DesignerRow(_Result):
    """One designer's metrics (a leaderboard row). Shares are in [0, 1]; difficulties in logits.

    Attributes:
        intervals: seeded bootstrap-over-items 95 % intervals, per metric name (``broken_rate``, ``error_rate``,
            ``discrimination``, ``kendall_tau``, ``mean_tvd``, ``level_spearman``): [low, high].
        breakdown: by requested ``difficulty`` level, ``intent``, ``format`` and ``position`` (first / middle /
            last third of the designer's replies): group -> :class:`BreakdownCell`.
        generation_order: does quality fall with the item's place in the designer's generation order?
        self_preference, family_preference, family_incl_self_preference: its rows of ``preferences``.
        self_ranking: does its suite rank its own model higher than the seed benchmark does (None when its own
            model is not on the panel)?
    """

    designer: str
    model: str
    family: str
    answerer: str | None
    n_records: int
    n_suite: int
    n_core: int
    broken_rate: float | None
    by_status: dict[str, int]
    broken_reasons: dict[str, int]
    duplicate_rate: float | None
    slot_coverage: float | None
    core_coverage: float | None
    spec_alignment: dict[str, dict[str, Any]]
    mean_tvd: float | None
    difficulty: dict[str, Any]
    calibration: dict[str, Any] | None
    intervals: dict[str, list[float | None]]
    breakdown: dict[str, dict[str, BreakdownCell]]
    generation_order: GenerationOrder
    discrimination: dict[str, Any]
    ranking: dict[str, Any]
    accuracy_by_answerer: dict[str, float | None]
    generation: dict[str, Any]
    answering_ability: Ability | None = None
    design_score: float | None = None
    self_preference: PreferenceTest | None = None
    family_preference: PreferenceTest | None = None
    family_incl_self_preference: PreferenceTest | None = None
    self_ranking: SelfRanking | None = None


class CardSummary(_Result):
    name: str
    source: str
    n_items: int
    language: str
    modality: str


class PlanSummary(_Result):
    total: int
    targets: dict[str, dict[str, float]]
    counts: dict[str, dict[str, int]]


class ConfigSummary(_Result):
    source: str
    designers: list[dict[str, Any]]
    panel: list[dict[str, Any]]
    judge: str


class AccuracyMatrix(_Result):
    """The designer x answerer accuracy on core items; ``residual``: observed minus the joint fit's main-effects
    prediction (the interaction); ``cells``: "self" / "family" / "" per cell."""

    designers: list[str]
    answerers: list[str]
    accuracy: list[list[float | None]]
    n_items: list[int]
    residual: list[list[float | None]] | None = None
    cells: list[list[str]] = Field(default_factory=list)


class DesignersReport(_Result):
    """``report.json`` of ``benchfill designers run`` (see the module docstring)."""

    simulated: bool
    card: CardSummary
    plan: PlanSummary
    config: ConfigSummary
    strong_answerers: list[str]
    seed: dict[str, Any] | None
    irt: dict[str, Any]
    designers: list[DesignerRow]
    matrix: AccuracyMatrix
    preferences: list[PreferenceTest]
    joint_fit: dict[str, Any] | None
    across_designers: dict[str, Any]
    files: dict[str, str]

    @model_serializer(mode="wrap")
    def _labelled(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {"label": SIM_NOTE, **data} if self.simulated else data

    @classmethod
    def from_json_file(cls, path: Any) -> "DesignersReport":
        """Read a ``report.json`` (its ``label`` is implied by ``simulated``)."""
        import json
        from pathlib import Path

        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data.pop("label", None)
        return cls.model_validate(data)

    def row(self, designer: str) -> DesignerRow:
        """The row of ``designer`` (KeyError naming the designers when absent)."""
        for r in self.designers:
            if r.designer == designer:
                return r
        raise KeyError(f"{designer!r} is not a designer of this run ({', '.join(r.designer for r in self.designers)})")


class CallUsage(_Result):
    """Model calls of one invocation (cached calls cost nothing)."""

    calls_made: int
    cached: int
    errors: int
    retries: int
    malformed_replies: int
    tokens_in: int
    tokens_out: int
    cost: float


class DesignersRun(_Result):
    """What one ``run_designers`` invocation did: the run folder, the report, the stages reused from an earlier
    run (their inputs were unchanged) and the call usage."""

    out: str
    report: DesignersReport
    skipped_stages: list[str] = Field(default_factory=list)
    usage: CallUsage


# ----------------------------------------------------------------------------------------------- rewriters


class RewriterScore(_Result):
    """One rewriter over all its runs. Rates are shares of finished gaps; deviation |d - t| on the normalised
    difficulty axis (filled gaps only); cost in US dollars (0 for local and simulated models)."""

    rewriter: str
    runs: list[str]
    n_gaps: int
    n_open: int
    n_filled: int
    success_rate: float | None
    within_tolerance_rate: float | None
    mean_deviation: float | None
    median_deviation: float | None
    mean_rounds: float | None
    candidates_per_gap: float | None
    total_cost: float
    cost_per_filled_gap: float | None
    simulated: bool = False


class RewriterRun(_Result):
    run: str
    rewriter: str
    gaps: int
    statuses: dict[str, int]


class RewriterReport(_Result):
    """``benchfill designers rewriters``: the rewriter leaderboard of fill runs."""

    method: str
    tolerance: float | str
    runs: list[RewriterRun]
    rewriters: list[RewriterScore]

    @property
    def simulated(self) -> bool:
        return any(s.simulated for s in self.rewriters)

    @model_serializer(mode="wrap")
    def _labelled(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {"label": REWRITER_SIM_NOTE, **data} if self.simulated else data


__all__ = ["AccuracyMatrix", "CallUsage", "DesignerRow", "DesignersReport", "DesignersRun", "GenerationOrder",
           "PreferenceTest", "RewriterReport", "RewriterScore", "SIM_NOTE", "SelfRanking"]
