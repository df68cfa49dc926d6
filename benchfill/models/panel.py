"""The panel engine: panel models answer items, each answer graded; the one scheduler every command that asks the
panel uses (``evaluate``, the fill's full, adaptive and confirmation labelling, ``designers run``).

An answer is one job ``(model, item index, rollout index)``; rollout ``k`` is sample index ``k`` of the call cache,
so the same job asked by any command is the same cached call and is never paid for twice.

Scheduling, per model:

- API models (litellm): one worker per ``max_concurrency`` slot, each model its own queue, so a slow model never
  holds up the others;
- ``vllm/`` models: all of the model's missing rollouts are drawn in one engine batch first
  (:meth:`~benchfill.models.client.ModelClient.prefetch`), then read from the cache; one vLLM model runs to the
  end before the next starts (one engine on the GPU at a time), beside the API models;
- ``sim/`` models: one worker (the simulated world answers synchronously; more workers would only interleave).

Failed calls are not outcomes: a failed call (or judge) gives a ``skip`` grade with ``failure`` set
(:attr:`PanelAnswer.retryable`); each caller decides whether that stops it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

from benchfill.data import Item
from benchfill.models.client import CallResult, ModelClient
from benchfill.models.config import ModelConfig
from benchfill.models.failures import CallFailure, FailureKind
from benchfill.models.grading import Grader, GradeResult
from benchfill.models.prompts import PromptLibrary
from benchfill.models.requests import AnswerRequest


@dataclass(frozen=True)
class PanelJob:
    """One answer to ask: ``model`` answers item ``item`` (an index into the engine's items), rollout ``rollout``."""

    model: ModelConfig
    item: int
    rollout: int


@dataclass(frozen=True)
class PanelAnswer:
    """One asked answer: the call and its grade."""

    job: PanelJob
    result: CallResult
    grade: GradeResult

    @property
    def retryable(self) -> bool:
        """True where the call or the judge failed: not an outcome; a rerun asks again."""
        return self.grade.retryable

    def failure(self) -> CallFailure:
        """What failed, for a retryable answer: the call (its kind and error), else the grading judge's call."""
        if not self.result.ok and self.result.error:
            return self.result.failure()
        return CallFailure(self.grade.failure_kind or FailureKind.JUDGE, self.grade.reason or "judge failed")


async def _answer_and_grade(client: ModelClient, grader: Grader, model: ModelConfig, request: AnswerRequest,
                            messages: list[dict[str, str]], fingerprint: str, sample_index: int
                            ) -> tuple[CallResult, GradeResult]:
    """One panel answer (rollout ``sample_index``) and its grade; both come from the cache when known.

    A failed call is a ``skip``; a judge failure is not stored, so a rerun asks again (its successful calls are
    cached anyway). The answer is graded from the stored reply, after it was committed."""
    item = request.item
    result = await client.complete(model, messages, sample_index=sample_index, role="panel", request=request)
    if not result.ok:
        return result, GradeResult("skip", 0.0, "call", None, f"call failed: {result.error}", failure="call",
                                   failure_kind=result.failure().kind)
    stored = client.cache.get_grade(result.key, fingerprint)
    if stored is not None:
        return result, GradeResult(stored["label"], stored["score"] or 0.0, stored["method"], stored["extracted"],
                                   stored["reason"])
    grade = await grader.grade(item, result.text, result.finish_reason)
    if not grade.retryable:
        client.cache.put_grade(result.key, fingerprint, grade.as_dict())
    return result, grade


class PanelEngine:
    """Asks panel models about a fixed list of items (see the module docstring).

    ``items``: the items jobs refer to by index; their answer prompts and grading fingerprints are built once."""

    def __init__(self, client: ModelClient, grader: Grader, items: Sequence[Item],
                 prompts: PromptLibrary | None = None) -> None:
        self.client = client
        self.grader = grader
        self.items = list(items)
        self.requests = [AnswerRequest(it) for it in self.items]
        self.messages = [r.messages(prompts) for r in self.requests]
        self.fingerprints = [grader.fingerprint(it) for it in self.items]

    @staticmethod
    def all_jobs(models: Sequence[ModelConfig], n_items: int, rollouts: Callable[[ModelConfig], int] | None = None
                 ) -> list[PanelJob]:
        """Every model x item x rollout (``rollouts(model)``, default the model's own ``rollouts``), in
        (model, item, rollout) order."""
        count = rollouts or (lambda m: m.rollouts)
        return [PanelJob(m, i, k) for m in models for i in range(n_items) for k in range(count(m))]

    async def answer(self, jobs: Sequence[PanelJob],
                     on_answer: Callable[[PanelAnswer], None] | None = None) -> list[PanelAnswer]:
        """Ask every job; returns the answers in the order of ``jobs``. ``on_answer`` is called after each."""
        out: list[PanelAnswer | None] = [None] * len(jobs)
        by_model: dict[str, list[int]] = defaultdict(list)
        models: dict[str, ModelConfig] = {}
        for n, job in enumerate(jobs):
            by_model[job.model.label].append(n)
            models.setdefault(job.model.label, job.model)

        async def ask(n: int) -> None:
            job = jobs[n]
            result, grade = await _answer_and_grade(self.client, self.grader, job.model, self.requests[job.item],
                                                   self.messages[job.item], self.fingerprints[job.item], job.rollout)
            answer = PanelAnswer(job, result, grade)
            out[n] = answer
            if on_answer is not None:
                on_answer(answer)

        async def run_model(label: str) -> None:
            model, todo = models[label], by_model[label]
            if model.backend == "vllm":
                rollouts: dict[int, list[int]] = defaultdict(list)
                for n in todo:
                    rollouts[jobs[n].item].append(jobs[n].rollout)
                await self.client.prefetch(model, [(self.messages[i], ks) for i, ks in rollouts.items()],
                                           role="panel")
            queue: asyncio.Queue[int] = asyncio.Queue()
            for n in todo:
                queue.put_nowait(n)
            workers = 1 if model.backend == "sim" else model.max_concurrency

            async def worker() -> None:
                while True:
                    try:
                        n = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    await ask(n)

            await asyncio.gather(*(worker() for _ in range(max(1, min(workers, len(todo))))))

        async def run_vllm_models(labels: list[str]) -> None:
            for label in labels:  # one engine on the GPU at a time: each vllm/ model runs to the end first
                await run_model(label)

        await asyncio.gather(*(run_model(lb) for lb in by_model if models[lb].backend != "vllm"),
                             run_vllm_models([lb for lb in by_model if models[lb].backend == "vllm"]))
        return [a for a in out if a is not None]
