"""Objective-first grading (benchfill/models/README.md): route by item format, use an LLM judge only for open answers.

- ``mcq``: option letter(s), exact / set match. The parser reads "Answer: C" as C (never the A of "Answer"),
  "(B)" as B, "B and D" as {B, D}, "the answer is c" as C, an option's text as its letter.
- ``numeric``: an integer gold matches only the same integer (13536 is wrong for 13535); any other gold matches
  within max(1e-9, 1e-6 |gold|); "1,000" = 1000, "1/2" = 0.5, "50%" = 50 or 0.5, ``\\frac{1}{2}`` = 0.5.
- ``math``: the last ``\\boxed{}`` (else "the answer is ...", else the last inline math); equal when the normalised
  strings match, or the numbers agree, or math-verify (then sympy) finds them symbolically equal. The symbolic
  step runs in a worker process with a wall-clock limit (:data:`SYMBOLIC_TIMEOUT`, :mod:`benchfill.models.symbolic`);
  its outcome is a :class:`MathOutcome`, and one that ran out of time is graded wrong, its reason saying so.
- ``short``: normalised exact match (case, punctuation, articles, whitespace), also against
  ``metadata['aliases']``.
- ``open``: an LLM judge (the ``grader`` role) with a rubric, returning JSON {label, score}.

Who is at fault decides what an answer counts as (benchfill/models/README.md):

- the model's fault — an empty reply, no extractable final answer, an answer in the wrong form (an option letter
  that is not an option), unfinished reasoning, or a reply cut by the token limit (``finish_reason == "length"``):
  ``incorrect``, a counted trial, with the reason in ``reason`` (``reason_kind`` = ``"form"``);
- not the model's fault — no reply at all (the call failed), a gold that cannot be graded objectively with no judge
  configured, a judge call that failed: ``skip``, not a trial (listed in skipped.csv).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import math
import re
import string
import threading
import unicodedata
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from benchfill.data import Item, keyed_letters, letters_in
from benchfill.models import quiet_math_verify, symbolic
from benchfill.models.failures import FailureKind
from benchfill.models.replies import fenced_blocks, final_text, reply_json

if TYPE_CHECKING:  # pragma: no cover
    from benchfill.models.client import ModelClient
    from benchfill.models.config import ModelConfig
    from benchfill.models.prompts import PromptLibrary

Label = Literal["correct", "incorrect", "skip"]
# why no verdict could be reached: the model call failed, or the grading judge did. Neither is the item's or the
# answering model's doing, so the grade is never stored and a rerun asks again (every command stops on them)
Failure = Literal["call", "judge"]
GRADER_VERSION = "3"  # bump when a rule changes: stored grades keyed by an older version are recomputed


@dataclass(frozen=True)
class GradeResult:
    """The verdict on one answer.

    Attributes:
        label: ``correct``, ``incorrect`` or ``skip`` (ungradable: not a trial).
        score: 1.0 / 0.0 for objective formats; the judge's score in [0, 1] for open answers.
        method: the route taken (``mcq``, ``numeric``, ``math``, ``short``, ``judge``...).
        extracted: the answer read from the response, if any.
        reason: why, for skips and judge verdicts.
        failure: for a skip that a rerun should ask again: ``call`` (the answer's call failed) or ``judge``
            (the grading judge's did); None otherwise.
        failure_kind: for such a skip, why: the failed call's kind, or :attr:`FailureKind.JUDGE` for a judge
            whose replies stayed unusable after its re-asks.
    """

    label: Label
    score: float
    method: str
    extracted: str | None = None
    reason: str | None = None
    failure: Failure | None = None
    failure_kind: FailureKind | None = None

    @property
    def counted(self) -> bool:
        return self.label != "skip"

    @property
    def retryable(self) -> bool:
        """A failed call or a failed grading judge: not a property of the item, so a rerun asks again."""
        return self.failure is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _skip(method: str, reason: str, extracted: str | None = None) -> GradeResult:
    return GradeResult("skip", 0.0, method, extracted, reason)


def _verdict(ok: bool, method: str, extracted: str | None, reason: str | None = None) -> GradeResult:
    return GradeResult("correct" if ok else "incorrect", 1.0 if ok else 0.0, method, extracted, reason)


FORM_PREFIX = "counted wrong: "  # the reason of every answer that is wrong by the model's fault, not its content


def _wrong(method: str, reason: str, extracted: str | None = None) -> GradeResult:
    """The model's fault (no extractable answer, wrong form, cut off): a counted trial, wrong, reason logged."""
    return GradeResult("incorrect", 0.0, method, extracted, FORM_PREFIX + reason)


def is_form_failure(result: GradeResult) -> bool:
    """Whether an ``incorrect`` verdict is the model's failure to answer in form (rather than a wrong answer)."""
    return result.label == "incorrect" and (result.reason or "").startswith(FORM_PREFIX)


# ----------------------------------------------------------------------------------------------- response text


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if there is none."""
    best = None
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for pos in range(start, len(text)):
            ch = text[pos]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    best = text[start:pos]
                    break
    if best is None:
        m = re.findall(r"\\boxed\s+([^\s$]+)", text)  # "\boxed 5"
        if m:
            best = m[-1]
    return best.strip() if best is not None else None


_ANSWER_IS = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=|would\s+be|should\s+be|will\s+be)\s*:?\s*(.+)", re.IGNORECASE
)


def answer_phrase(text: str) -> str | None:
    """What follows the last "answer is" / "Answer:" on its line, trimmed of markdown and a final period."""
    found = None
    for line in text.splitlines():
        for m in _ANSWER_IS.finditer(line):
            found = m.group(1)
    if found is None:
        return None
    found = found.strip().strip("*_").strip()
    found = re.sub(r"^\$+|\$+$", "", found.rstrip(".").strip()).strip()
    found = found.strip("*_ ").rstrip(".").strip()
    return found or None


def extract_final_answer(response: str | None) -> str | None:
    """The final answer of a free-form (math / numeric / short) response: last boxed, else "answer is ...",
    else the last inline math ``$...$``; None when nothing answer-like is there."""
    text, _ = final_text(response)
    if text is None:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    phrase = answer_phrase(text)
    if phrase is not None:
        inner = last_boxed(phrase)
        return inner if inner is not None else phrase
    maths = re.findall(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\$([^$]+)\$", text, flags=re.DOTALL)
    if maths:
        last = [g for g in maths[-1] if g][0]
        # the right-hand side of the last relation: "$\sqrt{242} \approx 38252$" answers 38252, not sqrt(242)
        return re.split(r"=|\\approx|\\simeq|≈", last)[-1].strip()
    return None


# ----------------------------------------------------------------------------------------------- numbers


def _strip_latex(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:left|right|displaystyle|!|,|;|:|quad|qquad)", "", s)
    s = s.replace("{,}", ",").replace("\\%", "%").replace("\\$", "").replace("−", "-").replace("\\cdot", "*")
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox|operatorname)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s)  # degrees
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    return s.strip()


_NUM = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+"
_NUM_RE = re.compile(rf"^(?:{_NUM})$")


def parse_number(text: str | None) -> tuple[float, bool] | None:
    """A number from an answer string, with whether it was a percentage: "1,000" -> 1000, "1/2" -> 0.5,
    "\\frac{1}{2}" -> 0.5, "-\\frac{3}{4}" -> -0.75, "50%" -> (50, True), "2.5 \\times 10^{3}" -> 2500,
    "12 cm" -> 12; None for anything else (expressions, tuples, words)."""
    if text is None:
        return None
    s = _strip_latex(text)
    s = s.rstrip(".").strip()
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    if s.lower().endswith("percent"):
        percent, s = True, s[: -len("percent")].strip()
    # trailing unit words ("12 cm", "5 dollars"), only after a plain number
    m = re.match(rf"^({_NUM}|[+-]?\d+\s*/\s*\d+)\s+[a-zA-Z][a-zA-Z .]*$", s)
    if m:
        s = m.group(1)
    s = s.replace(" ", "")
    frac = re.fullmatch(r"([+-]?)\\frac\{?([+-]?[\d.]+)\}?\{?([+-]?[\d.]+)\}?", s)
    if frac:
        try:
            value = float(frac.group(2)) / float(frac.group(3))
        except (ValueError, ZeroDivisionError):
            return None
        return (-value if frac.group(1) == "-" else value), percent
    slash = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)/([+-]?\d+(?:\.\d+)?)", s)
    if slash:
        try:
            return float(slash.group(1)) / float(slash.group(2)), percent
        except ZeroDivisionError:
            return None
    sci = re.fullmatch(rf"({_NUM})(?:\\times|\*|x)10\^\{{?([+-]?\d+)\}}?", s)
    if sci:
        return float(sci.group(1).replace(",", "")) * 10.0 ** int(sci.group(2)), percent
    if _NUM_RE.match(s):
        value = float(s.replace(",", ""))
        return (value, percent) if math.isfinite(value) else None
    return None


def numbers_close(gold: float, value: float) -> bool:
    """The grading rule: an integer gold matches only the same integer (13536 is wrong for 13535); any other gold
    matches within max(1e-9, 1e-6 |gold|)."""
    if float(gold).is_integer():
        return float(value) == float(gold)
    return abs(value - gold) <= max(1e-9, 1e-6 * abs(gold))


def numeric_equal(gold: str, pred: str) -> bool | None:
    """Whether two answer strings are the same number (a percentage matches either reading); None if either is
    not a number."""
    g, p = parse_number(gold), parse_number(pred)
    if g is None or p is None:
        return None
    gv, gpct = g
    pv, ppct = p
    golds = {gv} | ({gv / 100} if gpct else set())
    preds = {pv} | ({pv / 100} if ppct else set())
    return any(numbers_close(a, b) for a in golds for b in preds)


# ----------------------------------------------------------------------------------------------- math


def _normalise_math(s: str) -> str:
    s = _strip_latex(s)
    s = re.sub(r"\s+", "", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"^[a-zA-Z]\s*=", "", s)  # "x = 5" -> "5"
    return s.rstrip(".")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# ------------------------------------------------------------------------- symbolic work, in a worker process
#
# The cheap steps (normalised strings, numbers) run here; only what they cannot decide goes to math-verify and
# sympy, which run in a worker process (benchfill.models.symbolic) so that a pathological expression ends after
# SYMBOLIC_TIMEOUT seconds of wall clock on any thread, inside an event loop too. The worker starts on the first
# such comparison and is reused; one that overruns is killed and the next comparison gets a fresh one.

SYMBOLIC_TIMEOUT = 5.0  # seconds one symbolic step (math-verify then sympy; a closed form's value) may take: the
# limit math-verify's own alarm used to set on the main thread; an ordinary comparison takes milliseconds
SYMBOLIC_WORKERS = 2  # worker processes at most (concurrent grades share them; a third waits for one)
# what a worker imports before its first comparison: this module, and the libraries installed here
_SYMBOLIC_PRELOAD = ("benchfill.models.grading", *(name for name in ("math_verify", "sympy", "latex2sympy2_extended")
                                                   if importlib.util.find_spec(name) is not None))


def _warm_up() -> None:
    """In a fresh worker, before its first comparison: math-verify's and latex2sympy's lazy set-up (a parser
    built, sympy's caches) costs a few tenths of a second, which would otherwise come out of that comparison's
    time."""
    symbolic_compare("x^2+2x+1", "(x+1)^2")
    _closed_form_value("\\sqrt{2}")


_SYMBOLIC = symbolic.Pool(_SYMBOLIC_PRELOAD, size=SYMBOLIC_WORKERS, warmup=_warm_up)


class MathOutcome(StrEnum):
    """What a symbolic comparison came to: ``equal``, ``not_equal`` (compared, and different; also a comparison
    that raised), ``unparsed`` (neither math-verify nor sympy could read a side), ``timed_out`` (no verdict within
    :data:`SYMBOLIC_TIMEOUT`: the worker was killed) or ``failed`` (the worker died, or could not run it)."""

    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    UNPARSED = "unparsed"
    TIMED_OUT = "timed_out"
    FAILED = "failed"


UNDECIDED = (MathOutcome.TIMED_OUT, MathOutcome.FAILED)  # no verdict was reached: GradeResult.reason says which


def close_symbolic_workers() -> None:
    """End the symbolic worker processes now (they end at interpreter exit anyway); a later comparison starts a
    fresh one."""
    _SYMBOLIC.close()


def symbolic_worker_pids() -> list[int]:
    """The process ids of the symbolic workers running now (none until a comparison needed one)."""
    return _SYMBOLIC.pids()


def _in_worker(fn: Any, *args: Any) -> symbolic.Outcome | None:
    """``fn(*args)`` in a symbolic worker, within :data:`SYMBOLIC_TIMEOUT`; None where no worker process can be
    started (:class:`benchfill.models.symbolic.WorkerUnavailable`): then the caller does the work itself, bounded
    only as before (math-verify's alarm, on the main thread)."""
    try:
        return _SYMBOLIC.call(fn, *args, timeout=SYMBOLIC_TIMEOUT)
    except symbolic.WorkerUnavailable:
        return None


class _WorkerFailed(Exception):
    """Raised inside a memoised function so that a worker's death is not memoised (a later call tries again)."""


def _undecided_reason(outcome: MathOutcome) -> str:
    if outcome is MathOutcome.TIMED_OUT:
        return f"symbolic comparison timed_out after {SYMBOLIC_TIMEOUT:g} s: not shown equal"
    return "symbolic comparison failed in its worker process: not shown equal"


def _closed_form_value(text: str) -> float | None:
    """latex2sympy's numeric value of a closed form (runs in the worker)."""
    try:
        from latex2sympy2_extended import latex2sympy

        expr = latex2sympy(_strip_latex(text))
        if getattr(expr, "free_symbols", None):
            return None
        value = complex(expr.evalf())
    except Exception:
        return None
    if abs(value.imag) > 1e-12 or not math.isfinite(value.real):
        return None
    return value.real


def _latex_value_outcome(text: str) -> tuple[float | None, MathOutcome | None]:
    """(the value of a closed form or None, the undecided outcome when the worker gave no answer)."""
    try:
        return _latex_value_memo(text)
    except _WorkerFailed:
        return None, MathOutcome.FAILED


@functools.lru_cache(maxsize=65536)
def _latex_value_memo(text: str) -> tuple[float | None, MathOutcome | None]:
    parsed = parse_number(text)
    if parsed is not None:
        return parsed[0], None
    done = _in_worker(_closed_form_value, text)
    if done is None:
        return _closed_form_value(text), None
    if done.status == "ok":
        return done.value, None
    if done.status == "timed_out":
        return None, MathOutcome.TIMED_OUT
    raise _WorkerFailed


def latex_value(text: str) -> float | None:
    """The numeric value of a closed-form LaTeX expression (``\\sqrt{2}``, ``2\\pi``), or None (also when working it
    out took longer than :data:`SYMBOLIC_TIMEOUT`)."""
    return _latex_value_outcome(text)[0]


def _math_verify_equal(gold: str, pred: str, alarm: bool = True) -> bool | None:
    """math-verify's verdict; None when it could not parse one side (then sympy gets a try). ``alarm``: let
    math-verify bound itself with its ``signal.alarm`` timeout where it can (the main thread); the worker process
    passes False, its caller's wall-clock limit being the one bound."""
    try:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except ImportError:  # pragma: no cover - math-verify is a dependency
        return None
    quiet_math_verify()
    # math-verify times out with signal.alarm, which only works in the main thread.
    timeout = 5 if alarm and _in_main_thread() else None
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    try:
        g = parse(f"${gold}$", extraction_config=configs, parsing_timeout=timeout)
        p = parse(f"${pred}$", extraction_config=configs, parsing_timeout=timeout)
        if not g or not p:
            return None
        return bool(verify(g, p, timeout_seconds=timeout))
    except Exception:  # a parser crash on odd input means "not shown equal", never a crash of the run
        return None


def _sympy_outcome(gold: str, pred: str) -> MathOutcome:
    try:
        import sympy
        from latex2sympy2_extended import latex2sympy
    except ImportError:  # pragma: no cover
        return MathOutcome.UNPARSED
    try:
        a, b = latex2sympy(_strip_latex(gold)), latex2sympy(_strip_latex(pred))
    except Exception:
        return MathOutcome.UNPARSED
    try:
        diff = sympy.simplify(a - b)
        return MathOutcome.EQUAL if bool(diff == 0) else MathOutcome.NOT_EQUAL
    except Exception:
        return MathOutcome.NOT_EQUAL


def _sympy_equal(gold: str, pred: str) -> bool:
    return _sympy_outcome(gold, pred) is MathOutcome.EQUAL


def symbolic_compare(gold: str, pred: str, alarm: bool = False) -> MathOutcome:
    """math-verify's verdict, sympy's when math-verify cannot parse a side: the symbolic step, run as it is (the
    worker process runs it; ``alarm`` as for :func:`_math_verify_equal`)."""
    verdict = _math_verify_equal(gold, pred, alarm)
    if verdict is not None:
        return MathOutcome.EQUAL if verdict else MathOutcome.NOT_EQUAL
    return _sympy_outcome(gold, pred)


def symbolic_outcome(gold: str, pred: str) -> MathOutcome:
    """:func:`symbolic_compare` in a worker process, within :data:`SYMBOLIC_TIMEOUT` seconds of wall clock, from
    any thread; in this process (math-verify's main-thread alarm its only bound) where no worker can start."""
    done = _in_worker(symbolic_compare, gold, pred)
    if done is None:
        return symbolic_compare(gold, pred, alarm=True)
    if done.status == "ok":
        return MathOutcome(done.value)
    return MathOutcome.TIMED_OUT if done.status == "timed_out" else MathOutcome.FAILED


def math_outcome(gold: str, pred: str) -> MathOutcome:
    """How two answers compare: normalised strings, then numbers (both here), then the symbolic step
    (:func:`symbolic_outcome`, in a worker process). Memoised: rollouts often repeat an answer, and math-verify
    costs ms; a timed-out outcome too (a repeated pathological answer costs one timeout, not one per rollout), but
    not a worker's death (a later call tries again)."""
    try:
        return _math_outcome_memo(gold, pred)
    except _WorkerFailed:
        return MathOutcome.FAILED


@functools.lru_cache(maxsize=65536)
def _math_outcome_memo(gold: str, pred: str) -> MathOutcome:
    if _normalise_math(gold) == _normalise_math(pred):
        return MathOutcome.EQUAL
    same_number = numeric_equal(gold, pred)
    if same_number is not None:
        return MathOutcome.EQUAL if same_number else MathOutcome.NOT_EQUAL
    outcome = symbolic_outcome(gold, pred)
    if outcome is MathOutcome.FAILED:
        raise _WorkerFailed
    return outcome


def math_equal(gold: str, pred: str) -> bool:
    """Symbolic equality of two answers (:func:`math_outcome` is ``equal``)."""
    return math_outcome(gold, pred) is MathOutcome.EQUAL


def _grade_math(item: Item, response: str | None, method: str) -> GradeResult:
    text, why = final_text(response)
    if text is None:
        return _wrong(method, why or "empty response")
    extracted = extract_final_answer(text)
    if extracted is None and method == "numeric":
        numbers = re.findall(_NUM + r"|[+-]?\d+/\d+", text)
        extracted = numbers[-1] if numbers else None
    if extracted is None:
        stripped = text.strip().rstrip(".")
        words = re.findall(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}", stripped)  # prose words, not \latex commands
        if len(stripped) <= 40 and "\n" not in stripped and len(words) <= 1:
            extracted = stripped  # a bare answer ("3/4", "x = 2", "\sqrt{2}")
    if extracted is None or not extracted.strip():
        return _wrong(method, "no final answer found")
    # A comparison that reached no verdict in time (or whose worker died) is graded wrong, a counted trial, as the
    # symbolic step treats everything it cannot decide (a side it cannot parse, a parser crash, math-verify's own
    # alarm): "not shown equal". A skip would drop the trial, so an answer written as a pathological expression
    # would take itself out of the count; the reason names the outcome, so the case stays visible.
    if method == "numeric":
        same = numeric_equal(item.answer, extracted)
        if same is None:  # a closed form for a numeric gold: compare its value with the same tolerance
            gold = parse_number(item.answer)
            value, undecided = _latex_value_outcome(extracted) if gold is not None else (None, None)
            if undecided is not None:
                return _verdict(False, "numeric", extracted, _undecided_reason(undecided))
            if gold is not None and value is not None:
                same = numbers_close(gold[0], value)
        if same is not None:
            return _verdict(same, "numeric", extracted)
    outcome = math_outcome(item.answer, extracted)
    if outcome in UNDECIDED:
        return _verdict(False, "math", extracted, _undecided_reason(outcome))
    return _verdict(outcome is MathOutcome.EQUAL, "math", extracted)


# ----------------------------------------------------------------------------------------------- mcq

_LETTER_LIST = r"\(?([A-Za-z])\)?(?![A-Za-z])((?:\s*(?:,|and|&|/|\+)\s*\(?[A-Za-z]\)?(?![A-Za-z]))*)"
_MCQ_KEYWORDS = [
    # (priority, pattern): the answer statement outranks a mention of an option
    (3, r"final\s+answer\s*(?:is|:|=)?\s*:?"),
    (2, r"(?:correct\s+)?answer\s*(?:is|:|=|would\s+be|should\s+be|will\s+be)\s*:?"),
    (2, r"(?:correct|right|best)\s+(?:option|choice)s?\s*(?:is|are|:)\s*:?"),
    (1, r"(?:option|choice)s?\s*(?:is|are|:)?\s*"),
]


def _gold_letters(item: Item) -> set[str] | None:
    """The keyed option letter(s) of an mcq item: a letter list, an option's text, or a 0-based index."""
    from benchfill.models.prompts import LETTERS

    gold = item.answer.strip()
    choices = item.choices or []
    listed = keyed_letters(gold, len(choices))
    if listed is not None:
        return listed
    norm = normalize_short(gold)
    for k, choice in enumerate(choices):
        if normalize_short(_strip_option_prefix(choice)) == norm:
            return {LETTERS[k]}
    if gold.isdigit() and choices and int(gold) < len(choices):
        return {LETTERS[int(gold)]}
    return None


def _strip_option_prefix(choice: str) -> str:
    return re.sub(r"^\s*\(?[A-Za-z][.)]\s+", "", choice)


def extract_choice(response: str | None, n_choices: int | None, choices: list[str] | None = None) -> set[str] | None:
    """The option letter(s) a response commits to, or None when it commits to none (or to several, hedging).

    Priority: ``\\boxed{}``; "final answer"; "answer is / Answer:"; "correct option is"; the whole response being
    a letter list; an "answer is <option text>"; a lone "(X)". Within a level, the last statement wins.
    A lowercase letter counts only where nothing but punctuation follows it ("the answer is c." -> C, but not
    "the answer is a prime number").
    """
    from benchfill.models.prompts import LETTERS

    text, _ = final_text(response)
    if text is None:
        return None
    valid = set(LETTERS[: n_choices or 10])

    def take(fragment_match: re.Match[str], tail: str) -> set[str] | None:
        first, rest = fragment_match.group(1), fragment_match.group(2) or ""
        letters = [first] + letters_in(rest)
        if any(c.islower() for c in letters) and not re.match(r"^\s*(?:[.,;:!?)\]*]|$)", tail):
            return None
        if first.upper() == "I" and re.match(r"^\s+(?:think|believe|would|am|guess|'m)\b", tail):
            return None
        if not re.match(r"^(?:[^A-Za-z]|$)", tail):
            return None
        found = {c.upper() for c in letters}
        return found if found <= valid else None

    boxed = last_boxed(text)
    if boxed is not None:
        inner = re.sub(r"\\text\{([^{}]*)\}", r"\1", boxed).strip()
        m = re.fullmatch(r"\(?([A-Za-z])\)?((?:\s*(?:,|and|&|/)\s*\(?[A-Za-z]\)?)*)\.?", inner)
        if m:
            found = {c.upper() for c in [m.group(1)] + letters_in(m.group(2) or "")}
            if found <= valid:
                return found
    best: tuple[int, int, set[str]] | None = None
    mentions: list[set[str]] = []
    for priority, keyword in _MCQ_KEYWORDS:
        for m in re.finditer(rf"(?i:{keyword})\s*\**\s*{_LETTER_LIST}", text):
            got = take(m, text[m.end():])
            if not got:
                continue
            if priority == 1:
                mentions.append(got)  # "option B ..." is a mention, not a commitment: used only if unanimous
            elif best is None or (priority, m.start()) > (best[0], best[1]):
                best = (priority, m.start(), got)
    if best is not None:
        return best[2]
    if mentions and all(found == mentions[0] for found in mentions):
        return mentions[0]
    whole = text.strip().strip("*").strip()
    whole = re.sub(r"^(?:answer|option|choice)\s*:?\s*", "", whole, flags=re.IGNORECASE).rstrip(".").strip("*").strip()
    m = re.fullmatch(r"\(?([A-Za-z])\)?((?:\s*(?:,|and|&|/)\s*\(?[A-Za-z]\)?)*)", whole)
    if m:
        found = {c.upper() for c in [m.group(1)] + letters_in(m.group(2) or "")}
        if found <= valid:
            return found
    if choices:
        phrase = answer_phrase(text)
        candidates = [phrase] if phrase else []
        candidates.append(text)
        for cand in candidates:
            norm = normalize_short(cand)
            hits = [LETTERS[k] for k, c in enumerate(choices) if normalize_short(_strip_option_prefix(c)) == norm]
            if len(hits) == 1:
                return {hits[0]}
    lone = {c for c in re.findall(r"(?:^|[\s:])\(([A-Z])\)(?=[\s.,;:!?]|$)", text) if c in valid}
    lone |= {c for c in re.findall(r"(?m)^\s*\**([A-Z])\**[.)]?\s*$", text) if c in valid}
    if len(lone) == 1:
        return lone
    return None


def _grade_mcq(item: Item, response: str | None) -> GradeResult:
    text, why = final_text(response)
    if text is None:
        return _wrong("mcq", why or "empty response")
    gold = _gold_letters(item)
    if gold is None:
        return _skip("mcq", f"gold answer {item.answer!r} is not an option letter or option text")
    found = extract_choice(text, len(item.choices) if item.choices else None, item.choices)
    if found is None:
        return _wrong("mcq", "no option letter found (or one that is not an option)")
    return _verdict(found == gold, "mcq", ",".join(sorted(found)))


# ----------------------------------------------------------------------------------------------- short

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "“”‘’«»")


def normalize_short(text: str) -> str:
    """SQuAD-style normalisation: unicode NFKC, lower case, no punctuation, no articles, single spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _strip_latex(text) if "\\" in text else text
    text = text.translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _grade_short(item: Item, response: str | None) -> GradeResult:
    text, why = final_text(response)
    if text is None:
        return _wrong("short", why or "empty response")
    extracted = last_boxed(text) or answer_phrase(text)
    if extracted is None:
        stripped = text.strip().rstrip(".")
        if len(stripped.split()) <= 8 and "\n" not in stripped:
            extracted = stripped
    if extracted is None:
        return _wrong("short", "no final answer found (expected 'Answer: ...')")
    golds = [item.answer] + [str(a) for a in item.metadata.get("aliases", []) or []]
    norm = normalize_short(extracted)
    if not norm:
        return _wrong("short", "empty final answer", extracted)
    for gold in golds:
        if normalize_short(gold) == norm:
            return _verdict(True, "short", extracted)
        same_number = numeric_equal(gold, extracted)
        if same_number:
            return _verdict(True, "short", extracted)
    return _verdict(False, "short", extracted)


# ----------------------------------------------------------------------------------------------- structured
#
# A structured answer (BenchBench's "structured" question type, e.g. a list or a table) is JSON: an array when the
# question asks for items in a fixed order (the steps of a procedure, a ranking, a sequence), an object when it asks
# for named fields (a table row: {"mean": 4, "median": 3.5}). The gold is stored as that JSON. Grading is
# field-wise: an object matches when it has the same fields (names compared normalised: case, spaces, "_" / "-")
# and every field's value matches; an array matches when it has the same length and every element matches in
# order; values nest. A leaf matches as a number (the grading rules: an integer only itself, else a 1e-6 relative
# tolerance), else by normalised exact match (as ``short``). All fields must match: there is no partial credit
# (the reason says how many did). Unordered sets of options are multi-answer multiple choice (set match), not this.


def parse_structured(text: str | None) -> list[Any] | dict[str, Any] | None:
    """A structured answer from text: JSON (a non-empty array or object, read by
    :func:`benchfill.models.replies.reply_json`) in the last ```json fence, else after "Answer:", else anywhere in
    the text; else a one-line list written "a, b, c" / "a; b; c" / "a -> b -> c" after "Answer:". None when there
    is no such answer (or the array / object is empty)."""
    if text is None:
        return None
    blocks = fenced_blocks(text)
    if blocks and (value := _structured_json(blocks[-1])) is not None:
        return value
    phrase = answer_phrase(text)
    if phrase is not None:
        if (value := _structured_json(phrase)) is not None:
            return value
        parts = [p.strip() for p in re.split(r"\s*(?:->|→|;|,)\s*", phrase) if p.strip()]
        if len(parts) >= 2:
            return parts
    return _structured_json(text)


def _structured_json(text: str) -> list[Any] | dict[str, Any] | None:
    try:
        return reply_json(text, accept=_nonempty_container)
    except ValueError:
        return None


def _nonempty_container(value: Any) -> bool:
    return isinstance(value, (list, dict)) and bool(value)


def _field_name(key: Any) -> str:
    return normalize_short(re.sub(r"[_\-]+", " ", str(key)))


def _leaves_equal(gold: Any, pred: Any) -> bool:
    if isinstance(gold, bool) or isinstance(pred, bool):
        return str(gold).lower() == str(pred).lower()
    g, p = str(gold), str(pred)
    same_number = numeric_equal(g, p)
    if same_number is not None:
        return same_number
    return normalize_short(g) == normalize_short(p)


def structured_match(gold: Any, pred: Any) -> tuple[int, int]:
    """(fields that match, fields in the gold), counted over the gold's leaves: an object field missing from the
    answer (or a list element past its end) is a mismatch; an answer with extra fields or elements matches at most
    ``total - 1``. Correct means ``matched == total``."""
    if isinstance(gold, dict):
        if not isinstance(pred, dict):
            return 0, _n_leaves(gold)
        by_name = {_field_name(k): v for k, v in pred.items()}
        matched = total = 0
        for k, v in gold.items():
            name = _field_name(k)
            if name in by_name:
                m, t = structured_match(v, by_name[name])
            else:
                m, t = 0, _n_leaves(v)
            matched, total = matched + m, total + t
        extra = set(by_name) - {_field_name(k) for k in gold}
        return (min(matched, total - 1) if extra and total else matched), total
    if isinstance(gold, list):
        if not isinstance(pred, list):
            return 0, _n_leaves(gold)
        matched = total = 0
        for k, v in enumerate(gold):
            m, t = structured_match(v, pred[k]) if k < len(pred) else (0, _n_leaves(v))
            matched, total = matched + m, total + t
        return (min(matched, total - 1) if len(pred) > len(gold) and total else matched), total
    if isinstance(pred, (dict, list)):
        return 0, 1
    return int(_leaves_equal(gold, pred)), 1


def _n_leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_n_leaves(v) for v in value.values()) or 1
    if isinstance(value, list):
        return sum(_n_leaves(v) for v in value) or 1
    return 1


def structured_equal(gold: Any, pred: Any) -> bool:
    """Whether a structured answer matches the gold field by field (see :func:`structured_match`)."""
    matched, total = structured_match(gold, pred)
    return total > 0 and matched == total


def grade_structured(item: Item, response: str | None) -> GradeResult:
    """Grade a ``structured`` item: the gold and the response's final answer read as JSON (:func:`parse_structured`)
    and compared field-wise (:func:`structured_match`). No structured final answer in the response: wrong, by the
    model's fault; a gold that is not a JSON array or object: ``skip``."""
    import json

    text, why = final_text(response)
    if text is None:
        return _wrong("structured", why or "empty response")
    gold = parse_structured(item.answer)
    if gold is None:
        return _skip("structured", f"gold answer {item.answer[:80]!r} is not a JSON array or object")
    pred = parse_structured(text)
    if pred is None:
        return _wrong("structured", "no structured final answer (a JSON array or object) found")
    matched, total = structured_match(gold, pred)
    extracted = json.dumps(pred, ensure_ascii=False)
    return _verdict(matched == total, "structured", extracted, f"{matched}/{total} fields match")


# ----------------------------------------------------------------------------------------------- entry points


def grade(item: Item, response: str | None, finish_reason: str | None = None) -> GradeResult:
    """Grade one response objectively by the item's format. ``open`` items need a judge: use :class:`Grader`
    (here they are ``skip``). ``response`` None means no reply (the call failed): ``skip``. A reply cut by the
    token limit (``finish_reason == "length"``) is wrong, whatever it holds."""
    if response is None:
        return _skip(item.resolved_format if item.resolved_format != "open" else "judge", "no response")
    if finish_reason == "length":
        return _wrong(item.resolved_format, "ran out of tokens (finish_reason length)")
    fmt = item.resolved_format
    if fmt == "structured":
        return grade_structured(item, response)
    if fmt == "mcq":
        return _grade_mcq(item, response)
    if fmt in ("numeric", "math"):
        return _grade_math(item, response, fmt)
    if fmt == "short":
        return _grade_short(item, response)
    text, why = final_text(response)
    if text is None:
        return _wrong("judge", why or "empty response")
    return _skip("judge", "open answer needs a grader model (none configured)")


class JudgeReply(BaseModel):
    """The grader's reply (prompts/grade_judge.txt): its JSON schema is the call's ``response_format``; the reply
    itself is read by the more lenient :func:`_judge_validator` (any case of the label, the score optional)."""

    label: Literal["correct", "incorrect"]
    score: float = Field(ge=0.0, le=1.0)
    reason: str = ""


def _judge_validator(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    label = str(obj.get("label", "")).strip().lower()
    if label not in ("correct", "incorrect"):
        raise ValueError('"label" must be "correct" or "incorrect"')
    score = obj.get("score", 1.0 if label == "correct" else 0.0)
    try:
        score = float(score)
    except (TypeError, ValueError):
        raise ValueError('"score" must be a number from 0 to 1') from None
    if not 0.0 <= score <= 1.0:
        raise ValueError('"score" must be a number from 0 to 1')
    return {"label": label, "score": score, "reason": str(obj.get("reason", ""))[:500]}


class Grader:
    """Grades responses: objective rules first; ``open`` items go to the grader model (a judge with a rubric).

    Args:
        client: the :class:`~benchfill.models.client.ModelClient` for judge calls (None: open items are skipped).
        judge: the ``grader`` role's model config.
        prompts: the template library (``grade_judge``).
        max_reasks: re-asks when the judge's JSON is malformed.
    """

    def __init__(self, client: "ModelClient | None" = None, judge: "ModelConfig | None" = None,
                 prompts: "PromptLibrary | None" = None, max_reasks: int = 2) -> None:
        self.client = client
        self.judge = judge
        self.prompts = prompts
        self.max_reasks = max_reasks

    def fingerprint(self, item: Item) -> str:
        """What a stored grade of ``item`` depends on (gold, choices, format, rules version, judge model)."""
        import hashlib
        import json

        judge = self.judge.label if (self.judge is not None and item.resolved_format == "open") else None
        blob = json.dumps([GRADER_VERSION, item.resolved_format, item.answer, item.choices,
                           item.metadata.get("aliases"), item.metadata.get("rubric"), judge,
                           item.question if judge else None], ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    async def grade(self, item: Item, response: str | None, finish_reason: str | None = None) -> GradeResult:
        """Grade one response; an open item's verdict comes from the judge (its failures -> ``skip``). The judge
        call is keyed by the response text, so the same answer in two rollouts is judged once."""
        if item.resolved_format != "open" or response is None or finish_reason == "length":
            # in a thread, not on the event loop: a symbolic comparison may wait up to SYMBOLIC_TIMEOUT seconds
            return await asyncio.to_thread(grade, item, response, finish_reason)
        text, why = final_text(response)
        if text is None:
            return _wrong("judge", why or "empty response")
        if self.client is None or self.judge is None:
            return _skip("judge", "open answer needs a grader model (none configured)")
        from benchfill.models.requests import GradeRequest

        request = GradeRequest(item, text)
        messages = request.messages(self.prompts)
        result = await self.client.complete_json(
            self.judge, messages, _judge_validator, sample_index=0, role="grader", max_reasks=self.max_reasks,
            schema=JudgeReply, request=request,
        )
        if not result.ok or result.parsed is None:
            return GradeResult("skip", 0.0, "judge", None, f"judge failed: {result.error}", failure="judge",
                               failure_kind=result.failure_kind or FailureKind.JUDGE)
        verdict = result.parsed
        return GradeResult(verdict["label"], verdict["score"], "judge", None, verdict["reason"] or None)
