"""Optional vLLM engine for ``vllm/<hf-model-or-path>`` models (``pip install 'benchfill[vllm]'``).

vLLM is imported inside functions only, so benchfill imports and runs without it (and without a GPU). The engine is
the offline ``vllm.LLM``; a batch of prompts goes through one ``LLM.chat`` call. Results are stored through the same
call cache as every other backend (one row per rollout), so a resumed run skips what is done.

Three rules, each checked against vLLM's own source (``vllm/sampling_params.py``,
``vllm/v1/engine/parallel_sampling.py``, ``vllm/entrypoints/llm.py``):

- **One request per missing rollout, with its own seed.** vLLM seeds child ``i`` of an ``n > 1`` request with
  ``seed + i``, so asking ``n = len(missing)`` with the seed of the first missing rollout would redraw rollouts
  0, 1, ... of a resumed run as "new" ones. Rollout ``k`` is therefore its own ``SamplingParams(n=1,
  seed=cfg.seed + k)`` request; the prompt is shared through vLLM's prefix cache, so this costs little — and it
  draws exactly what child ``k`` of one ``n``-request with seed ``cfg.seed`` would.
- **No silent truncation.** ``SamplingParams.max_tokens`` defaults to 16; a ``vllm/`` model must set
  ``max_tokens`` (checked with the config, before any call). Sampling fields the config leaves out (temperature,
  top_p, top_k, min_p, repetition_penalty) come from the model's generation defaults,
  ``LLM.get_default_sampling_params()`` (the engine reads ``generation_config.json``).
- **One model at a time.** Each model's engine runs in its own subprocess (spawned); moving to another model stops
  that process, which frees its GPU memory for certain (an in-process ``del`` of an engine does not reliably).

Config (a panel entry)::

    [[panel]]
    model = "vllm/Qwen/Qwen3-8B"          # or vllm//models/local/path
    temperature = 0.6
    top_p = 0.95
    max_tokens = 8192                     # required: vLLM's own default is 16 tokens
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
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from benchfill.errors import InputError, MissingExtra

# SamplingParams fields a config may set (names as in vllm.SamplingParams).
SAMPLING_FIELDS = frozenset({
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "stop", "stop_token_ids", "seed", "ignore_eos", "skip_special_tokens",
})
# the fields vLLM takes from a model's generation_config.json (ModelConfig.get_diff_sampling_param)
MODEL_DEFAULT_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")
CHAT_FIELDS = frozenset({"chat_template_kwargs", "chat_template", "add_generation_prompt"})
_NOT_ENGINE = frozenset({"batch_prompts"})


@dataclass(frozen=True)
class Sample:
    """One sampled completion: its text, token counts and finish reason (``length``: cut by max_tokens)."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str | None = None


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def check_vllm_config(cfg: Any, where: str, source: str) -> None:
    """What a ``vllm/`` model needs before any call: ``max_tokens`` set and only known sampling fields."""
    if cfg.max_tokens is None and "max_tokens" not in cfg.params:
        raise InputError(source, f"{where}.max_tokens: required for vllm/ models (vLLM's SamplingParams default "
                                 "is 16 tokens, which would silently cut every answer)")
    unknown = sorted(set(cfg.params) - SAMPLING_FIELDS - CHAT_FIELDS)
    if unknown:
        raise InputError(source, f"{where}.params: {', '.join(unknown)} are not vllm.SamplingParams fields")


def request_kwargs(cfg: Any, sampling: Mapping[str, Any], sample_index: int,
                   model_defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``vllm.SamplingParams`` arguments of rollout ``sample_index``: one output (``n = 1``), the seed
    ``cfg.seed + sample_index``, the model's generation defaults under the config's own fields. Pure (no vLLM)."""
    unknown = sorted(set(sampling) - SAMPLING_FIELDS - CHAT_FIELDS)
    if unknown:
        raise InputError(cfg.model, f"parameter(s) {', '.join(unknown)} are not vllm.SamplingParams fields")
    kwargs = {k: v for k, v in (model_defaults or {}).items() if k in MODEL_DEFAULT_FIELDS and v is not None}
    kwargs.update({k: v for k, v in sampling.items() if k in SAMPLING_FIELDS and k != "seed"})
    if kwargs.get("max_tokens") is None:
        raise InputError(cfg.model, "max_tokens: required for vllm/ models (vLLM's default is 16 tokens)")
    base = sampling.get("seed", cfg.seed)
    kwargs["n"] = 1
    kwargs["seed"] = None if base is None else int(base) + int(sample_index)
    return kwargs


def build_requests(cfg: Any, conversations: Sequence[Sequence[Mapping[str, Any]]],
                   sample_indices: Sequence[Sequence[int]], sampling: Mapping[str, Any],
                   model_defaults: Mapping[str, Any] | None = None
                   ) -> list[tuple[int, int, list[dict[str, Any]], dict[str, Any]]]:
    """One request per (conversation, missing rollout): ``(conversation index, rollout, messages, SamplingParams
    arguments)``. Pure: unit-tested without vLLM or a GPU."""
    if len(conversations) != len(sample_indices):
        raise ValueError("one list of sample indices per conversation")
    out = []
    for i, (conv, ks) in enumerate(zip(conversations, sample_indices)):
        messages = [dict(m) for m in conv]
        for k in ks:
            out.append((i, int(k), messages, request_kwargs(cfg, sampling, k, model_defaults)))
    return out


def engine_args(cfg: Any) -> dict[str, Any]:
    """``vllm.LLM`` arguments of a config: its ``vllm_engine`` table (less ``batch_prompts``), the model's own
    generation defaults on (``generation_config = "auto"``), and the base seed."""
    args = {k: v for k, v in cfg.vllm_engine.items() if k not in _NOT_ENGINE}
    args.setdefault("generation_config", "auto")
    if cfg.seed is not None:
        args.setdefault("seed", cfg.seed)
    return args


def _engine_key(cfg: Any) -> tuple[str, str]:
    return cfg.model, json.dumps(engine_args(cfg), sort_keys=True, default=str)


# ----------------------------------------------------------------------------------------------- the engine


class _Engine:
    """One ``vllm.LLM`` and the calls made on it. Lives in the engine subprocess (or in-process for tests)."""

    def __init__(self, model: str, args: Mapping[str, Any]) -> None:
        try:
            from vllm import LLM
        except ImportError:
            raise MissingExtra(model, "vllm", "vllm") from None
        self.llm = LLM(model=model, **dict(args))
        self._defaults: dict[str, Any] | None = None

    def model_defaults(self) -> dict[str, Any]:
        if self._defaults is None:
            base = self.llm.get_default_sampling_params() if hasattr(self.llm, "get_default_sampling_params") else None
            self._defaults = {k: getattr(base, k, None) for k in MODEL_DEFAULT_FIELDS} if base is not None else {}
            if self._defaults.get("max_tokens") == 16:  # vLLM's class default, not the model's: never used
                self._defaults.pop("max_tokens")
        return self._defaults

    def run(self, conversations: list[list[dict[str, Any]]], kwargs: list[dict[str, Any]],
            chat_kwargs: dict[str, Any]) -> list[tuple[str, int, int, str | None]]:
        from vllm import SamplingParams

        params = [SamplingParams(**kw) for kw in kwargs]
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=False, **chat_kwargs)
        result = []
        for out in outputs:
            if len(out.outputs) != 1:
                raise RuntimeError(f"vLLM returned {len(out.outputs)} outputs for an n = 1 request")
            o = out.outputs[0]
            result.append((o.text, len(getattr(out, "prompt_token_ids", None) or []), len(o.token_ids or []),
                           getattr(o, "finish_reason", None)))
        return result


def _serve(conn: Any, model: str, args: dict[str, Any], parent: int | None = None
           ) -> None:  # pragma: no cover - runs in the subprocess
    """The engine subprocess: answer ``("defaults",)`` and ``("run", ...)`` messages until ``("stop",)``. It ends
    with its parent, however the parent ends (SIGTERM: vLLM's own engine processes get to stop with it)."""
    import signal

    from benchfill.forking import die_with_parent

    die_with_parent(parent, signal.SIGTERM)
    try:
        engine = _Engine(model, args)
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        try:
            if msg[0] == "defaults":
                conn.send(("ok", engine.model_defaults()))
            else:
                conn.send(("ok", engine.run(*msg[1:])))
        except BaseException as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _EngineProcess:
    """A model's engine in its own spawned process; :meth:`close` ends it (and frees its GPU memory). It ends with
    this process too (:func:`_serve`), whichever thread started it (:func:`benchfill.forking.on_a_lasting_thread`)."""

    def __init__(self, model: str, args: Mapping[str, Any]) -> None:
        import multiprocessing as mp

        from benchfill.forking import on_a_lasting_thread

        ctx = mp.get_context("spawn")  # CUDA cannot be re-initialised in a forked child
        self._conn, child = ctx.Pipe()
        # not a daemon: vLLM starts processes of its own (the engine core, tensor-parallel workers), which a
        # daemonic process may not do; an exit hook ends it instead
        self.process = ctx.Process(target=_serve, args=(child, model, dict(args), os.getpid()), name=f"vllm:{model}",
                                   daemon=False)
        # started on a thread that lasts as long as this process: its death signal comes when the thread that forked
        # it ends, and the engine is usually asked for on an asyncio.to_thread worker (ModelClient._vllm_batch), whose
        # executor asyncio.run shuts down at its end while the client, and its engine, may be used again
        on_a_lasting_thread(self.process.start)
        child.close()
        self._model = model
        import atexit

        atexit.register(self.close)
        self._expect("ready")

    def _expect(self, what: str) -> Any:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the vLLM engine process for {self._model} died") from None
        if kind == "error":
            raise RuntimeError(f"vLLM engine for {self._model}: {value}")
        return value

    def model_defaults(self) -> dict[str, Any]:
        self._conn.send(("defaults",))
        return self._expect("ok")

    def run(self, conversations: list[list[dict[str, Any]]], kwargs: list[dict[str, Any]],
            chat_kwargs: dict[str, Any]) -> list[tuple[str, int, int, str | None]]:
        self._conn.send(("run", conversations, kwargs, chat_kwargs))
        return self._expect("ok")

    def close(self) -> None:
        if self._conn.closed:
            return
        try:
            self._conn.send(("stop",))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=60)
        if self.process.is_alive():  # pragma: no cover - an engine that does not stop is killed
            self.process.kill()
            self.process.join(timeout=10)
        self._conn.close()


class VLLMBackend:
    """vLLM engines, one model at a time: the engine of the model in use is kept; asking for another model first
    ends it. ``isolate=True`` (the default) runs each engine in its own subprocess; ``False`` keeps it in this
    process (tests with a stand-in ``vllm`` module), dropping the previous one on a switch."""

    def __init__(self, isolate: bool = True) -> None:
        self.isolate = isolate
        self._key: tuple[str, str] | None = None
        self._engine: Any = None
        self.started: list[str] = []  # models whose engine was started, in order (inspection, tests)

    def engine(self, cfg: Any) -> Any:
        """The engine for a ``vllm/...`` config; a different model's engine is stopped first."""
        key = _engine_key(cfg)
        if self._key != key:
            self.close()
            path = cfg.model.removeprefix("vllm/")
            self._engine = (_EngineProcess if self.isolate else _Engine)(path, engine_args(cfg))
            self._key = key
            self.started.append(cfg.model)
        return self._engine

    def generate(self, cfg: Any, conversations: Sequence[Sequence[Mapping[str, Any]]],
                 sample_indices: Sequence[Sequence[int]], sampling: Mapping[str, Any]) -> list[list[Sample]]:
        """Sample rollouts ``sample_indices[i]`` of conversation ``i`` (one request each, its own seed), all in one
        ``LLM.chat`` call (blocking); ``result[i][j]`` is rollout ``sample_indices[i][j]``."""
        engine = self.engine(cfg)
        requests = build_requests(cfg, conversations, sample_indices, sampling, engine.model_defaults())
        chat_kwargs = {k: v for k, v in sampling.items() if k in CHAT_FIELDS}
        raw = engine.run([r[2] for r in requests], [r[3] for r in requests], chat_kwargs) if requests else []
        if len(raw) != len(requests):
            raise RuntimeError(f"vLLM returned {len(raw)} outputs for {len(requests)} requests")
        result: list[list[Sample]] = [[] for _ in conversations]
        for (i, _, _, _), (text, tin, tout, finish) in zip(requests, raw):
            result[i].append(Sample(text, tin, tout, finish))
        return result

    def close(self) -> None:
        """End the current engine (its subprocess, or drop the in-process engine)."""
        engine, self._engine, self._key = self._engine, None, None
        if engine is None:
            return
        if isinstance(engine, _EngineProcess):
            engine.close()
        else:
            del engine
            import gc

            gc.collect()
