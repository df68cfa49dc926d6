"""Panel validation (Stage 3): static checks, every answerer answering every item, objective-first grading,
dynamic checks, and the item-quality judge. The core set is the items the checks leave ``clean``.

- Static checks (:func:`static_problems`): missing question or answer, multiple choice (single or multi-answer)
  without options, the wrong number of options, empty or duplicate options, a gold answer that is not among the
  options (for multi-answer: an empty key set or a letter that is not an option), a numeric gold that is not a
  number, a structured gold that is not a JSON array or object.
- Dynamic checks (:func:`dynamic_flags`), on ALL of an item's graded answers (every answerer, every rollout):
  fewer than ``min_answers`` gradable answers; every strong model fails; strong models disagree (different final
  answers); more than ``ceiling`` or fewer than ``floor`` of the answers correct. A flagged item goes to the judge.
- The item-quality judge (prompts/designer_item_judge.txt) says ``clean``, ``not_well_posed``,
  ``gold_incorrect`` or ``ambiguous``. An unflagged item is clean; a flagged one takes the judge's verdict; a judge
  failure leaves it ``unjudged`` (not core: nobody vouched for it).
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from benchfill.data import Item
from benchfill.designers.requests import ItemJudgeRequest
from benchfill.models.grading import _gold_letters, normalize_short, parse_number, parse_structured

if TYPE_CHECKING:  # pragma: no cover
    from benchfill.designers.generate import DesignedItem
    from benchfill.models.client import ModelClient
    from benchfill.models.config import ModelConfig
    from benchfill.models.grading import Grader
    from benchfill.models.panel import PanelAnswer
    from benchfill.models.prompts import PromptLibrary

VERDICTS = ("clean", "not_well_posed", "gold_incorrect", "ambiguous")
_VERDICT_ALIASES = {
    "clean": "clean", "ok": "clean", "valid": "clean", "well posed": "clean",
    "not well posed": "not_well_posed", "ill posed": "not_well_posed", "ill-posed": "not_well_posed",
    "not_well_posed": "not_well_posed", "gold incorrect": "gold_incorrect", "gold_incorrect": "gold_incorrect",
    "incorrect gold": "gold_incorrect", "wrong answer": "gold_incorrect", "ambiguous": "ambiguous",
}


# ----------------------------------------------------------------------------------------------- static


def static_problems(rec: "DesignedItem", n_options: int, declared_format: str = "") -> list[str]:
    """What is wrong with an item before anyone answers it (empty list: nothing)."""
    problems = []
    if len(rec.question.strip()) < 10:
        problems.append("missing question" if not rec.question.strip() else "question too short")
    if not rec.answer.strip():
        problems.append("missing answer")
    if rec.format in ("mcq", "mcq_multi") or declared_format in ("mcq", "mcq_multi"):
        choices = rec.choices or []
        if not choices:
            problems.append("multiple choice without options")
        else:
            if len(choices) != n_options:
                problems.append(f"wrong option count ({len(choices)}, expected {n_options})")
            if any(not c.strip() for c in choices):
                problems.append("empty option")
            norm = [normalize_short(c) for c in choices if c.strip()]
            if len(set(norm)) != len(norm):
                problems.append("duplicate options")
            if rec.answer.strip():
                gold = _gold_letters(Item(id=rec.id, question=rec.question or "?", answer=rec.answer,
                                          choices=choices if len(choices) >= 2 else None, format="mcq"))
                if gold is None:
                    problems.append("gold answer not among the options")
    elif rec.format == "numeric" and rec.answer.strip() and parse_number(rec.answer) is None:
        problems.append("numeric answer is not a number")
    elif rec.format == "structured" and rec.answer.strip() and parse_structured(rec.answer) is None:
        problems.append("structured answer is not a JSON array or object")
    return problems


# ----------------------------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Answer:
    """One graded answer: ``label`` correct / incorrect / skip; ``extracted`` the final answer read."""

    item: str
    answerer: str
    k: int
    label: str
    extracted: str | None
    method: str
    reason: str | None = None
    failure: str | None = None  # GradeResult.failure: "call" / "judge" (a rerun asks again), else None

    @property
    def retryable(self) -> bool:
        return self.failure is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def answer_items(
    items: Sequence[Item], panel: Sequence["ModelConfig"], client: "ModelClient", grader: "Grader",
    library: "PromptLibrary | None" = None, on_answer: Callable[[Answer], None] | None = None,
) -> list[Answer]:
    """Every answerer answers every item ``rollouts`` times; each answer is graded objective-first (grades are
    cached in the call cache next to the answer). Returns answers in (answerer, item, rollout) order."""
    from benchfill.models.panel import PanelEngine

    engine = PanelEngine(client, grader, items, library)

    def to_answer(a: "PanelAnswer") -> Answer:
        g = a.grade
        return Answer(items[a.job.item].id, a.job.model.label, a.job.rollout, g.label, g.extracted, g.method,
                      g.reason, g.failure)

    def report(a: "PanelAnswer") -> None:
        if on_answer is not None:
            on_answer(to_answer(a))

    jobs = PanelEngine.all_jobs(panel, len(items))  # (answerer, item, rollout) order, as the result
    return [to_answer(a) for a in await engine.answer(jobs, on_answer=report)]


def count_matrix(answers: Iterable[Answer], answerers: Sequence[str], item_ids: Sequence[str]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(n_correct, n_trials), each (J answerers, I items); skipped answers are not trials."""
    jpos = {a: j for j, a in enumerate(answerers)}
    ipos = {t: i for i, t in enumerate(item_ids)}
    correct = np.zeros((len(answerers), len(item_ids)), dtype=np.int64)
    trials = np.zeros_like(correct)
    for a in answers:
        if a.label == "skip" or a.answerer not in jpos or a.item not in ipos:
            continue
        trials[jpos[a.answerer], ipos[a.item]] += 1
        correct[jpos[a.answerer], ipos[a.item]] += a.label == "correct"
    return correct, trials


# ----------------------------------------------------------------------------------------------- dynamic


def answer_key(answer: Answer) -> str:
    """What two answers must share to agree: a correct answer agrees with every other correct one (they all match
    the gold, however written); otherwise the extracted answer, numbers compared by value ("1,000" = "1000")."""
    if answer.label == "correct":
        return "<gold>"
    text = (answer.extracted or "").strip()
    number = parse_number(text) if text else None
    if number is not None:
        return f"num:{number[0]:.10g}"
    return "txt:" + normalize_short(text)


def choose_strong(accuracy: Mapping[str, float], explicit: Mapping[str, bool | None], share: float = 1 / 3
                  ) -> list[str]:
    """The strong answerers: those marked ``strong = true`` when any is; else the top ``share`` of the panel by
    ``accuracy`` (at least two, ties broken by panel order)."""
    marked = [a for a, s in explicit.items() if s]
    if marked:
        return marked
    names = list(accuracy)
    k = min(len(names), max(2, int(np.ceil(share * len(names)))))
    order = sorted(range(len(names)), key=lambda j: (-accuracy[names[j]], j))
    return [names[j] for j in order[:k]]


def dynamic_flags(answers: Sequence[Answer], strong: Iterable[str], *, min_answers: int = 3,
                  ceiling: float = 0.95, floor: float = 0.05) -> tuple[list[str], int, float | None]:
    """The dynamic checks on ALL graded answers of one item. Returns (flags, gradable answers, share correct).

    Flags: ``too_few_answers``; ``all_strong_fail`` (every gradable answer of every strong model is wrong);
    ``strong_disagree`` (strong models' answers differ, :func:`answer_key`); ``ceiling`` (share correct >
    ``ceiling``); ``floor`` (share correct < ``floor``).
    """
    counted = [a for a in answers if a.label != "skip"]
    n = len(counted)
    if n == 0:
        return ["too_few_answers"], 0, None
    share = sum(a.label == "correct" for a in counted) / n
    if n < min_answers:
        return ["too_few_answers"], n, share
    flags = []
    strong = set(strong)
    strong_answers = [a for a in counted if a.answerer in strong]
    if strong_answers and all(a.label == "incorrect" for a in strong_answers):
        flags.append("all_strong_fail")
    if len({answer_key(a) for a in strong_answers}) >= 2:
        flags.append("strong_disagree")
    if share > ceiling:
        flags.append("ceiling")
    if share < floor:
        flags.append("floor")
    return flags, n, share


# ----------------------------------------------------------------------------------------------- judge


def judge_validator(obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    raw = " ".join(str(obj.get("verdict", obj.get("label", ""))).strip().lower().replace("-", " ").split())
    verdict = _VERDICT_ALIASES.get(raw) or _VERDICT_ALIASES.get(raw.replace("_", " "))
    if verdict is None:
        raise ValueError('"verdict" must be one of "clean", "not_well_posed", "gold_incorrect", "ambiguous"')
    return {"verdict": verdict, "reason": str(obj.get("reason", ""))[:500]}


def panel_summary(answers: Sequence[Answer], limit: int = 8) -> str:
    """'A: 3, B: 2, (no answer): 1' — the panel's final answers with counts, most frequent first."""
    counts = Counter((a.extracted or "(no answer)").strip()[:80] for a in answers)
    parts = [f"{text}: {k}" for text, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
    return ", ".join(parts) if parts else "(no answers)"


def judge_request(item: Item, flags: Sequence[str], answers: Sequence[Answer]) -> ItemJudgeRequest:
    """The item judge's request for ``item``: the flags that sent it for review and how the panel answered."""
    return ItemJudgeRequest(item, tuple(flags), panel_summary(answers))


@dataclass
class ItemVerdict:
    """The fate of one record: ``status`` is clean (core), not_well_posed, gold_incorrect, ambiguous, broken
    (static), unjudged (judge failed), duplicate or failed (call failure; both outside the suite)."""

    id: str
    designer: str
    status: str
    flags: list[str] = field(default_factory=list)
    n_answers: int = 0
    share_correct: float | None = None
    judge: str | None = None
    judge_reason: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def core(self) -> bool:
        return self.status == "clean"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def judge_items(
    records: Sequence["DesignedItem"], answers: Sequence[Answer], strong: Sequence[str], judge: "ModelConfig",
    client: "ModelClient", *, min_answers: int = 3, ceiling: float = 0.95, floor: float = 0.05,
    max_reasks: int = 2, library: "PromptLibrary | None" = None,
) -> list[ItemVerdict]:
    """Dynamic checks on every usable record, the judge on every flagged one; one verdict per record."""
    by_item: dict[str, list[Answer]] = defaultdict(list)
    for a in answers:
        by_item[a.item].append(a)
    verdicts: list[ItemVerdict] = []
    to_judge: list[tuple[ItemVerdict, Item]] = []
    for rec in records:
        if rec.status != "ok":
            verdicts.append(ItemVerdict(rec.id, rec.designer, rec.status, problems=list(rec.problems)))
            continue
        flags, n, share = dynamic_flags(by_item.get(rec.id, []), strong, min_answers=min_answers, ceiling=ceiling,
                                        floor=floor)
        v = ItemVerdict(rec.id, rec.designer, "clean", flags, n, share)
        verdicts.append(v)
        if flags:
            to_judge.append((v, rec.to_item()))

    async def ask(v: ItemVerdict, item: Item) -> None:
        request = judge_request(item, v.flags, by_item.get(item.id, []))
        res = await client.complete_json(judge, request.messages(library), judge_validator, role="item_judge",
                                         request=request, max_reasks=max_reasks)
        if res.ok and res.parsed is not None:
            v.judge, v.judge_reason = res.parsed["verdict"], res.parsed["reason"] or None
            v.status = v.judge
        else:
            v.status, v.judge_reason = "unjudged", res.error

    await asyncio.gather(*(ask(v, it) for v, it in to_judge))
    return verdicts
