"""Optional in-process vLLM engine for ``vllm/<hf-model-or-path>`` models (``pip install 'benchfill[vllm]'``).

vLLM is imported inside functions only, so benchfill imports and runs without it (and without a GPU). The engine
is the offline ``vllm.LLM``; a batch of prompts goes through one ``LLM.chat`` call, each prompt with
``SamplingParams(n=<rollouts still missing>)``, so all rollouts of all items are sampled together. Results are
stored through the same call cache as every other backend (one row per rollout), so a resumed run skips what is
done.

Config (a panel entry)::

    [[panel]]
    model = "vllm/Qwen/Qwen3-8B"          # or vllm//models/local/path
    temperature = 0.6
    top_p = 0.95
    max_tokens = 8192
    rollouts = 8
    vllm_engine = { tensor_parallel_size = 2, gpu_memory_utilization = 0.9, batch_prompts = 256 }
    params = { top_k = 20, chat_template_kwargs = { enable_thinking = true } }

``vllm_engine`` goes to ``vllm.LLM(...)`` (engine arguments) except ``batch_prompts`` (prompts per engine call; a
crash loses at most one such batch). Sampling fields go to ``vllm.SamplingParams``; ``chat_template_kwargs`` goes
to ``LLM.chat``.

Scale-out beyond one process is not done here: serve each model with ``vllm serve`` and reach the servers through
litellm (``hosted_vllm/...`` with ``api_base``, or ``api_bases`` for a Router) — see ``benchfill/models/README.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from benchfill.errors import InputError

# SamplingParams fields a config may set (names as in vllm.SamplingParams).
SAMPLING_FIELDS = frozenset({
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "stop", "stop_token_ids", "seed", "ignore_eos", "skip_special_tokens",
})
CHAT_FIELDS = frozenset({"chat_template_kwargs", "chat_template", "add_generation_prompt"})
_NOT_ENGINE = frozenset({"batch_prompts"})


@dataclass(frozen=True)
class Sample:
    """One sampled completion: its text and token counts."""

    text: str
    tokens_in: int
    tokens_out: int


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class VLLMBackend:
    """In-process vLLM engines, one per (model, engine arguments), created on first use and kept."""

    def __init__(self) -> None:
        self._engines: dict[tuple[str, str], Any] = {}

    def engine(self, cfg: Any) -> Any:
        """The ``vllm.LLM`` for a ``vllm/...`` model config (loads the weights the first time)."""
        args = {k: v for k, v in cfg.vllm_engine.items() if k not in _NOT_ENGINE}
        key = (cfg.model, json.dumps(args, sort_keys=True, default=str))
        if key not in self._engines:
            try:
                from vllm import LLM
            except ImportError:
                raise InputError(cfg.model, "the vLLM backend needs vllm: pip install 'benchfill[vllm]'") from None
            path = cfg.model.removeprefix("vllm/")
            if cfg.seed is not None:
                args.setdefault("seed", cfg.seed)
            self._engines[key] = LLM(model=path, **args)
        return self._engines[key]

    @staticmethod
    def sampling_params(cfg: Any, sampling: Mapping[str, Any], n: int) -> Any:
        """``vllm.SamplingParams(n=n, ...)`` from a config's sampling fields; unknown fields -> InputError."""
        from vllm import SamplingParams

        kwargs = {k: v for k, v in sampling.items() if k in SAMPLING_FIELDS}
        unknown = sorted(set(sampling) - SAMPLING_FIELDS - CHAT_FIELDS)
        if unknown:
            raise InputError(cfg.model, f"parameter(s) {', '.join(unknown)} are not vllm.SamplingParams fields")
        if "seed" not in kwargs and cfg.seed is not None:
            kwargs["seed"] = cfg.seed  # reproducible even without the cache
        return SamplingParams(n=n, **kwargs)

    def generate(self, cfg: Any, conversations: Sequence[Sequence[Mapping[str, Any]]], ns: Sequence[int],
                 sampling: Mapping[str, Any]) -> list[list[Sample]]:
        """Sample ``ns[i]`` completions of conversation ``i``, all in one ``LLM.chat`` call (blocking)."""
        if len(conversations) != len(ns):
            raise ValueError("one sample count per conversation")
        llm = self.engine(cfg)
        params = [self.sampling_params(cfg, sampling, n) for n in ns]
        chat_kwargs = {k: v for k, v in sampling.items() if k in CHAT_FIELDS}
        outputs = llm.chat([list(map(dict, c)) for c in conversations], sampling_params=params, use_tqdm=False,
                           **chat_kwargs)
        result: list[list[Sample]] = []
        for out, n in zip(outputs, ns):
            tokens_in = len(getattr(out, "prompt_token_ids", None) or [])
            samples = [Sample(o.text, tokens_in, len(o.token_ids or [])) for o in out.outputs]
            if len(samples) != n:
                raise RuntimeError(f"vLLM returned {len(samples)} samples, expected {n}")
            result.append(samples)
        return result
