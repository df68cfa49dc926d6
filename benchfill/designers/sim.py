"""Simulated designers, answerers and item judge for designer evaluation (offline; everything says SIMULATED).

:class:`DesignerSimWorld` extends the models layer's :class:`~benchfill.models.sim.SimWorld` (it adds roles,
changes none) so the real pipeline — prompts, cache, re-asks, grading, checks, IRT — runs end to end:

- ``designer``: reads the specifications of its :class:`~benchfill.designers.requests.DesignRequest` (never the
  prompt's text) and replies with the JSON the designer prompt asks for. Planted per designer (``[sim.designers.<name>]``, :class:`SimDesignerConfig`): a broken-item
  rate split over flaw kinds (static: missing answer, wrong option count, gold not among the options; dynamic:
  gold incorrect, ambiguous, not well posed), a difficulty skew, pure-noise items (no discrimination), duplicate
  stems, whole replies that are not JSON, off-spec items, a *style* that gives its own answerer
  (``self_bonus``) and its family's answerers (``family_bonus``) a logit bonus on its items, inverted calibration
  (``level_slope`` < 0), mislabelled levels (``mislabel_rate``), 2PL slopes (``item_slope``), negative-
  discrimination items (``negative_rate``) and a judge biased for or against it (``judge_favour``,
  ``judge_harshness``), generation-order degradation (``order_decay``), and BenchBench's ``mcq_multi`` (near-miss
  wrong answers: a subset or superset of the key, ``partial_rate``) and ``structured`` (JSON object) formats.
- ``panel`` on a designed item: correct with probability c + (1 - c) sigmoid(a (theta + bonus - b)), c = 1/k for
  k-option multiple choice (bonus: ``family_bonus`` for every answerer of the designer's family, its own answerer
  included, plus ``self_bonus`` for its own answerer; so against the out-of-family answerers the report's ``self``
  row estimates self_bonus + family_bonus, ``family`` family_bonus, ``family_incl_self`` family_bonus +
  self_bonus / (answerers of the family)); a correct answer gives the item's TRUE answer (so a wrong gold marks
  the panel wrong), an ambiguous item's correct answer is either defensible answer, a not-well-posed item gets
  guesses.
- ``item_judge`` (:class:`~benchfill.designers.requests.ItemJudgeRequest`): the planted truth (optionally wrong at
  ``judge_error_rate``).
- ``card`` (:class:`~benchfill.designers.requests.CardRequest`): labels seed items from their words (category = the
  existing label, else the first content term).

Each designed item carries its ground truth in the JSON field ``"sim"`` (kept in the item's metadata); answers
and verdicts are pure functions of (seed, model, call key), so reruns and resumes are identical.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

import numpy as np

from benchfill.data import Item, guessing_rate
from benchfill.designers.config import FLAWS, DesignersConfig, DesignerSimConfig, SimDesignerConfig
from benchfill.designers.requests import CardRequest, DesignRequest, ItemJudgeRequest
from benchfill.models.requests import AnswerRequest, ModelRequest
from benchfill.models.sim import SIM_LABEL, SIM_PREFIX, SimWorld, _rng, _u, render_answer

_VOCAB = (
    "lattice orbit prism vector matrix kernel spline tensor graph cycle chord radius tangent sector median "
    "quartile modulus residue divisor prime factor series limit integral slope vertex parabola ellipse hyperbola "
    "polygon circle sphere cone cylinder angle triangle square rhombus trapezoid diagonal perimeter area volume "
    "ratio fraction decimal percent average variance sample event outcome coin die card urn token ledger harbor "
    "garden river meadow canyon glacier summit valley island forest desert market bridge tower engine rocket "
    "comet planet nebula quasar photon proton neutron enzyme protein genome neuron synapse molecule crystal alloy"
).split()


def _name(model: str) -> str:
    return model.removeprefix(SIM_PREFIX)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class DesignerSimWorld(SimWorld):
    """The simulated world of designer evaluation (see the module docstring).

    Args:
        designers: planted properties by simulated designer name (``sim/<name>`` -> ``name``).
        designer_family / answerer_family: families by simulated name (from the config's ``family`` fields).
        self_answerer: designer name -> the simulated name of its own answerer (self-preference), if any.
        judge_error_rate: share of item-judge verdicts replaced by a random other verdict.
        **kwargs: the base :class:`SimWorld` (abilities, seed, format_failure_rate, ...).
    """

    def __init__(self, abilities: Mapping[str, float], *, designers: Mapping[str, SimDesignerConfig],
                 designer_family: Mapping[str, str], answerer_family: Mapping[str, str],
                 self_answerer: Mapping[str, str | None] | None = None, judge_error_rate: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(abilities, **kwargs)
        self.designers = dict(designers)
        self.designer_family = dict(designer_family)
        self.answerer_family = dict(answerer_family)
        self.self_answerer = dict(self_answerer or {})
        self.judge_error_rate = judge_error_rate

    @classmethod
    def from_designers_config(cls, cfg: DesignersConfig) -> "DesignerSimWorld":
        sim = cfg.sim or DesignerSimConfig()
        self_answerer = {}
        for d in cfg.designers:
            own = cfg.answerer_of(d)
            self_answerer[_name(d.model)] = _name(own.model) if own is not None else None
        return cls(
            sim.abilities, difficulties=sim.difficulties, seed=sim.seed, step=sim.step, noise=sim.noise,
            scatter=sim.scatter, invalid_rate=sim.invalid_rate, format_failure_rate=sim.format_failure_rate,
            b_range=tuple(sim.b_range) if sim.b_range else None,
            designers=sim.designers, designer_family={_name(d.model): d.family for d in cfg.designers},
            answerer_family={_name(a.model): a.family for a in cfg.panel}, self_answerer=self_answerer,
            judge_error_rate=sim.judge_error_rate,
        )

    # ------------------------------------------------------------------------------------------- dispatch

    def respond(self, model: str, request: ModelRequest | None, *, key: str, role: str) -> str:
        """The simulated reply to one call, from its typed request (the designers' own, else the base world's)."""
        if isinstance(request, DesignRequest):
            return self._design(_name(model), request, key)
        if isinstance(request, ItemJudgeRequest):
            return self._item_judge(_name(model), key, request.item)
        if isinstance(request, CardRequest):
            return self._card(request)
        if isinstance(request, AnswerRequest) and isinstance(request.item.metadata.get("sim"), dict):
            return self._answer_designed(model, key, request.item)
        return super().respond(model, request, key=key, role=role)

    # ------------------------------------------------------------------------------------------- designer

    def _design(self, name: str, request: DesignRequest, key: str) -> str:
        cfg = self.designers.get(name, SimDesignerConfig())
        rng = _rng(self.seed, "design", name, key)
        if rng.random() < cfg.malformed_rate:
            return f"{SIM_LABEL} designer: Sure! Here are some great questions for your benchmark. 1) What is ..."
        specs = request.specs
        n_opt = request.n_options
        items = []
        prev_question: str | None = None
        for pos, spec in enumerate(specs):
            item = self._design_one(name, cfg, spec, n_opt, rng, pos / (len(specs) - 1) if len(specs) > 1 else 0.0)
            if prev_question is not None and rng.random() < cfg.duplicate_rate:
                item["question"] = prev_question.upper()  # the same stem, differently cased: a duplicate
            prev_question = item.get("question") or prev_question
            items.append(item)
        return json.dumps({"items": items}, ensure_ascii=False)

    def _design_one(self, name: str, cfg: SimDesignerConfig, spec: Mapping[str, Any], n_opt: int,
                    rng: np.random.Generator, where: float = 0.0) -> dict[str, Any]:
        """One item for ``spec``; ``where`` is its place in the reply (0 = first written, 1 = last)."""
        cat, sub = str(spec.get("category", "general")), spec.get("subdomain")
        fmt, level, intent = str(spec.get("format", "numeric")), str(spec.get("difficulty", "L3")), \
            str(spec.get("intent", "standard"))
        if rng.random() < cfg.off_spec_rate:  # ignores the specification
            cat, sub = "Miscellaneous", None
            fmt = str(rng.choice(["mcq", "numeric", "short"]))
            level = str(rng.choice(["L1", "L2", "L3", "L4", "L5"]))
            intent = "adversarial" if intent == "standard" else "standard"
        if fmt == "open":
            fmt = "short"  # the simulated panel answers open items like short ones
        lv = int(level[1]) if re.fullmatch(r"L[1-5]", level) else 3
        if cfg.mislabel_rate and rng.random() < cfg.mislabel_rate:
            lv = int(rng.integers(1, 6))  # written at another level than the one it declares
        b = cfg.difficulty_shift + cfg.level_slope * (lv - 3) + cfg.difficulty_noise * float(rng.standard_normal())
        b += 0.3 if intent == "adversarial" else 0.0
        flaw = "none"
        if rng.random() < min(1.0, max(0.0, cfg.broken_rate + cfg.order_decay * where)):
            kinds = [k for k in FLAWS if cfg.flaw_mix.get(k, 0) > 0]
            w = np.array([cfg.flaw_mix[k] for k in kinds], float)
            flaw = str(kinds[int(rng.choice(len(kinds), p=w / w.sum()))])
        noise = bool(rng.random() < cfg.noise_rate)
        slope = cfg.item_slope * (-1.0 if cfg.negative_rate and rng.random() < cfg.negative_rate else 1.0)
        words = [str(w) for w in rng.choice(_VOCAB, size=9, replace=False)]
        x, y = (int(v) for v in rng.integers(2, 90, size=2))
        truth_value = x + y
        head = (f"{SIM_LABEL} item by {name} ({cat} / {sub or 'general'}, {level}, {intent}): consider the "
                f"{words[0]} {words[1]} of the {words[2]} {words[3]} near a {words[4]} {words[5]} {words[6]}.")
        ask = f" What is {x} + {y}?" if flaw != "not_well_posed" else " What is the value of the missing quantity?"
        out: dict[str, Any] = {"slot": spec.get("slot"), "category": cat, "subdomain": sub or "general",
                               "format": fmt, "difficulty": level, "intent": intent, "question": head + ask,
                               "rationale": f"{SIM_LABEL}: latent difficulty {b:+.3f}"}
        alt: str | None = None
        if fmt == "mcq":
            offsets = [0] + [int(o) for o in rng.choice(np.r_[-9:0, 1:10], size=n_opt - 1, replace=False)]
            values = [truth_value + o for o in offsets]
            order = rng.permutation(n_opt)
            choices = [str(values[k]) for k in order]
            truth = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[int(np.argmax(order == 0))]
            wrong_letters = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_opt] if c != truth]
            stated = truth
            if flaw == "gold_incorrect":
                stated = str(rng.choice(wrong_letters))
            elif flaw == "ambiguous":
                alt = str(rng.choice(wrong_letters))
            elif flaw == "gold_not_in_options":
                stated = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[n_opt + 1]
            elif flaw == "bad_options":
                choices = choices[:-1] if n_opt > 2 else choices + [str(truth_value + 20)]
            out["choices"] = choices
            out["answer"] = stated
        elif fmt == "mcq_multi":
            letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_opt]
            n_key = int(rng.integers(2, max(3, n_opt))) if rng.random() < cfg.multi_answer_rate else 1
            keyed = sorted(str(c) for c in rng.choice(list(letters), size=min(n_key, n_opt), replace=False))
            choices = []
            for k, c in enumerate(letters):  # keyed options are divisors of x + y, the others are not
                choices.append(f"{words[k % 9]} {truth_value if c in keyed else truth_value + 1 + k}")
            out["question"] = head + (" Select all that apply: which options carry the value of "
                                      f"{x} + {y}?" if flaw != "not_well_posed" else " Select all that apply.")
            truth = ", ".join(keyed)
            others = [c for c in letters if c not in keyed]

            def swap(keys: list[str]) -> str:  # one keyed letter replaced by an unkeyed one: a wrong key set
                if not others:
                    return ", ".join(keys[:-1]) if len(keys) > 1 else "A"
                return ", ".join(sorted(keys[1:] + [str(rng.choice(others))]))

            stated = truth
            if flaw == "gold_incorrect":
                stated = swap(keyed)
            elif flaw == "ambiguous":
                alt = swap(keyed)
            elif flaw == "gold_not_in_options":
                stated = ", ".join(keyed + ["ABCDEFGHIJKLMNOPQRSTUVWXYZ"[n_opt + 1]])
            elif flaw == "bad_options":
                choices = choices[:-1] if n_opt > 2 else choices + [f"{words[8]} {truth_value + 20}"]
            out["choices"] = choices
            out["answer"] = [c.strip() for c in stated.split(",")]
        elif fmt == "structured":
            fields = {"sum": truth_value, "difference": x - y, "larger": max(x, y)}
            truth = json.dumps(fields)
            out["question"] = head + (f" For {x} and {y}, give a JSON object with the fields sum, difference "
                                      "(first minus second) and larger." if flaw != "not_well_posed"
                                      else " Give the fields of the missing quantity.")
            wrong_field = str(rng.choice(list(fields)))
            changed = json.dumps({**fields, wrong_field: fields[wrong_field] + 11})
            stated = changed if flaw == "gold_incorrect" else truth
            alt = changed if flaw == "ambiguous" else None
            out["answer"] = json.loads(stated)
        elif fmt == "short":
            truth = words[7]
            out["question"] = head + (f" Which word comes first: {words[7]} or the one after it? (one word)"
                                      if flaw != "not_well_posed" else " Which word is meant?")
            stated = {"gold_incorrect": words[8]}.get(flaw, truth)
            alt = words[8] if flaw == "ambiguous" else None
            out["answer"] = stated
        else:  # numeric / math: a number (math items get a fraction, still graded by value)
            truth = str(truth_value) if fmt == "numeric" else f"\\frac{{{truth_value}}}{{2}}"

            def step(v: int) -> str:
                return f"{v}" if fmt == "numeric" else f"\\frac{{{v}}}{{2}}"

            # a wrong gold / second answer outside the simulated panel's wrong answers (gold + 1..10 steps)
            stated = step(truth_value + 11) if flaw == "gold_incorrect" else truth
            alt = step(truth_value + 13) if flaw == "ambiguous" else None
            out["answer"] = stated
        if flaw == "missing_answer" or (flaw == "gold_not_in_options" and fmt not in ("mcq", "mcq_multi")):
            out.pop("answer", None)
        if flaw == "bad_options" and fmt not in ("mcq", "mcq_multi"):
            out["choices"] = [out.get("answer", "1")]  # a single option: wrong option count
        out["sim"] = {"designer": name, "latent_b": round(b, 4), "flaw": flaw, "truth": truth, "alt": alt,
                      "noise": noise, "format": fmt, "slope": slope, "written_level": lv}
        return out

    # ------------------------------------------------------------------------------------------- panel

    def bonus(self, answerer: str, designer: str) -> float:
        """The planted logit bonus of ``answerer`` on ``designer``'s items: ``family_bonus`` for every answerer of
        its family (its own answerer included) plus ``self_bonus`` for its own answerer."""
        cfg = self.designers.get(designer)
        if cfg is None:
            return 0.0
        out = 0.0
        fam = self.answerer_family.get(answerer)
        if fam is not None and fam == self.designer_family.get(designer):
            out += cfg.family_bonus
        if self.self_answerer.get(designer) == answerer:
            out += cfg.self_bonus
        return out

    def _answer_designed(self, model: str, key: str, item: Item) -> str:
        truth = item.metadata["sim"]
        name = _name(model)
        if self.format_failure_rate and _u(self.seed, "fmt", model, key) < self.format_failure_rate:
            return f"{SIM_LABEL}: the simulated model rambles and gives no final answer."
        fmt = item.resolved_format
        k = len(item.choices) if fmt == "mcq" and item.choices else 0
        multi = truth.get("format") == "mcq_multi"
        guess = guessing_rate(k, multi=multi)  # the simulated designer's declared format, not the item's reading
        u = _u(self.seed, "panel", model, key)
        if truth.get("flaw") == "not_well_posed":
            correct = u < (guess if k else 0.02)  # a guess
        elif truth.get("noise"):
            correct = u < 0.5  # a coin flip, whatever the ability: no discrimination
        else:
            c = guess
            z = float(truth.get("slope", 1.0)) * (self.theta(model) + self.bonus(name, str(truth.get("designer")))
                                                  - float(truth.get("latent_b", 0.0)))
            correct = u < c + (1 - c) * _sigmoid(z)
        shown = str(truth.get("truth"))
        if correct and truth.get("alt") and _u(self.seed, "alt", model, key) < 0.5:
            shown = str(truth["alt"])
        w = _u(self.seed, "wrong", model, key)
        if multi:
            given = shown if correct else self._near_miss(shown, k, model, key, w, str(truth.get("designer")))
            return f"{SIM_LABEL} answer.\nAnswer: {given}"
        if fmt == "structured":
            if correct:
                return f"{SIM_LABEL} answer.\nAnswer: {shown}"
            fields = json.loads(shown)
            name_ = sorted(fields)[int(w * len(fields)) % len(fields)]
            fields[name_] = fields[name_] + 1 + int(w * 5)  # one field off: wrong, field by field
            return f"{SIM_LABEL} answer.\nAnswer: {json.dumps(fields)}"
        pseudo = item.model_copy(update={"answer": shown})
        return render_answer(pseudo, correct, w)

    def _near_miss(self, gold: str, k: int, model: str, key: str, w: float, designer: str) -> str:
        """A wrong answer to a multi-answer item: with the designer's ``partial_rate`` a near miss (one keyed letter
        dropped, or one unkeyed letter added), else one unkeyed letter."""
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:k]
        keyed = [c.strip() for c in gold.split(",") if c.strip()]
        others = [c for c in letters if c not in keyed]
        cfg = self.designers.get(designer, SimDesignerConfig())
        if _u(self.seed, "partial", model, key) < cfg.partial_rate:
            if len(keyed) > 1 and (w < 0.5 or not others):
                return ", ".join(keyed[:-1])  # a strict subset
            if others:
                return ", ".join(sorted(keyed + [others[int(w * len(others)) % len(others)]]))  # a superset
        return others[int(w * len(others)) % len(others)] if others else "A"

    # ------------------------------------------------------------------------------------------- judge / card

    def _item_judge(self, name: str, key: str, item: Item) -> str:
        truth = item.metadata.get("sim")
        flaw = truth.get("flaw", "none") if isinstance(truth, dict) else "none"
        verdict = {"gold_incorrect": "gold_incorrect", "ambiguous": "ambiguous", "none": "clean"}.get(
            flaw, "not_well_posed")
        cfg = self.designers.get(str(truth.get("designer"))) if isinstance(truth, dict) else None
        if cfg is not None:  # a judge biased for (or against) this designer
            if flaw != "none" and cfg.judge_favour and _u(self.seed, "judge-favour", name, key) < cfg.judge_favour:
                verdict = "clean"
            elif flaw == "none" and cfg.judge_harshness and \
                    _u(self.seed, "judge-harsh", name, key) < cfg.judge_harshness:
                verdict = "not_well_posed"
        if self.judge_error_rate and _u(self.seed, "judge-error", name, key) < self.judge_error_rate:
            others = [v for v in ("clean", "not_well_posed", "gold_incorrect", "ambiguous") if v != verdict]
            verdict = others[int(_u(self.seed, "judge-pick", name, key) * len(others)) % len(others)]
        return json.dumps({"verdict": verdict, "reason": f"{SIM_LABEL} verdict (planted flaw: {flaw})"})

    def _card(self, request: CardRequest) -> str:
        from benchfill.designers.text import terms

        labels = []
        for entry in request.entries:
            words = terms(entry.question)
            longest = sorted(set(words), key=lambda w: (-len(w), w))
            labels.append({
                "id": entry.id,
                "category": entry.existing_label or (words[0].title() if words else "General"),
                "subdomain": longest[0] if longest else "general",
                "terms": longest[:3],
            })
        return json.dumps({"labels": labels, "note": f"{SIM_LABEL} labels"})

