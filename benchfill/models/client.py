"""The model client: every chat call of benchfill goes through :class:`ModelClient`.

One call = (model config, messages, sample index). The client

1. looks the call up in the :class:`~benchfill.models.cache.CallCache` (a hit costs nothing and makes no call);
2. otherwise waits for a slot of that model's semaphore (``max_concurrency``) and calls the backend —
   ``litellm.acompletion`` (or a litellm ``Router`` over several ``api_bases``), the simulated world for
   ``sim/...``, or the in-process vLLM engine for ``vllm/...``;
3. retries 429s, timeouts, 5xx and connection errors with exponential backoff (tenacity; ``Retry-After`` honoured),
   at most ``max_retries`` times;
4. commits the answer, its tokens, cost (litellm's cost map; 0 for unknown or local models) and latency to the
   cache before returning — or, when it finally fails, logs the failure and returns it in ``CallResult.error``.

Rollout ``k`` of ``n`` is its own cache key and is sent ``seed = cfg.seed + k`` where the provider takes a seed.
Two identical calls in flight at once are made once. :meth:`ModelClient.complete_json` asks for its JSON with a
``response_format`` (the JSON schema of the reply's pydantic model) where the provider accepts one, and adds a
bounded number of re-asks when a reply does not parse or fails the caller's validator.

Later stages (the BenchFill search's rewriter, judge and panel labelling; designer evaluation) use the same three
methods: :meth:`~ModelClient.complete`, :meth:`~ModelClient.complete_json` and
:meth:`~ModelClient.complete_rollouts`; :class:`SyncModelClient` wraps them for synchronous code.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from benchfill.errors import InputError
from benchfill.models.cache import CallCache, call_key, scrub, secret_values
from benchfill.models.config import ModelConfig, import_litellm, litellm_loaded
from benchfill.models.failures import CallFailure, FailureKind, MalformedReply, classify_failure
from benchfill.models.replies import reply_json

if TYPE_CHECKING:  # pragma: no cover
    from benchfill.models.requests import ModelRequest
    from benchfill.models.sim import SimWorld
    from benchfill.models.vllm_backend import VLLMBackend

Messages = Sequence[Mapping[str, Any]]


@dataclass
class CallResult:
    """The outcome of one call.

    Attributes:
        text: the model's reply (None when the call failed).
        tokens_in, tokens_out: prompt and completion tokens (as reported; estimated for simulated models).
        cost: US dollars from litellm's cost map; 0 for unknown, local and simulated models.
        latency_s: wall time of the call including retries (the original call's, for a cache hit).
        cached: served from the cache (or by an identical call in flight): no new call was made.
        error: why the call failed after retries ("RateLimitError: ..."), or why structured output was rejected.
        key: the cache key. attempts: attempts made (0 for a cache hit).
        parsed: the validated object, for :meth:`ModelClient.complete_json`.
        finish_reason: the provider's ``finish_reason`` (``"length"``: cut by the token limit).
        failure_kind: why the call itself failed (infrastructure: unreachable, timeouts, 5xx, malformed replies
            after every retry), classified from the exception when it happened; None when it did not fail (also for
            a rejected structured reply, which is an answer).
    """

    text: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None
    key: str = ""
    model: str = ""
    role: str = ""
    sample_index: int = 0
    attempts: int = 0
    simulated: bool = False
    parsed: Any = None
    finish_reason: str | None = None
    failure_kind: FailureKind | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    @property
    def failed(self) -> bool:
        """The call itself failed — not an outcome of the search; a rerun retries it."""
        return self.failure_kind is not None

    def failure(self) -> CallFailure:
        """This call's failure, for :class:`CallsFailed` (a call that did not fail is "call failed")."""
        return CallFailure(self.failure_kind or FailureKind.OTHER, self.error or "")

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


@dataclass
class ClientStats:
    """Running totals for progress displays: ``cached`` hits, real ``calls``, final ``errors``, ``retries``,
    ``malformed`` structured replies, and the tokens / cost of the real calls made by this client."""

    requested: int = 0
    cached: int = 0
    calls: int = 0
    errors: int = 0
    retries: int = 0
    malformed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    first_errors: list[str] = field(default_factory=list)

    def add(self, result: CallResult) -> None:
        self.requested += 1
        if result.cached:
            self.cached += 1
            return
        self.calls += 1
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.cost += result.cost
        if result.error is not None:
            self.errors += 1
            if len(self.first_errors) < 5:
                self.first_errors.append(f"{result.model}: {result.error}")


# ----------------------------------------------------------------------------------------------- errors


def is_retryable(exc: BaseException) -> bool:
    """429, timeouts, 5xx, connection problems and malformed replies are worth another try; bad requests, auth,
    unknown models and context-window overflows are not."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError, MalformedReply)):
        return True
    litellm = import_litellm()
    final = tuple(
        getattr(litellm, name) for name in (
            "BadRequestError", "AuthenticationError", "NotFoundError", "PermissionDeniedError",
            "UnprocessableEntityError", "ContentPolicyViolationError", "UnsupportedParamsError",
        ) if hasattr(litellm, name)
    )
    if final and isinstance(exc, final):
        return False
    transient = tuple(
        getattr(litellm, name) for name in (
            "RateLimitError", "Timeout", "APIConnectionError", "InternalServerError", "ServiceUnavailableError",
            "BadGatewayError",
        ) if hasattr(litellm, name)
    )
    if isinstance(exc, transient) or "RateLimit" in type(exc).__name__:
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(exc, getattr(litellm, "APIError", ())):
        # a generic API error: a 5xx, or a 2xx whose body was not JSON (a proxy hiccup) -> retry; a 4xx -> final
        return status is None or not (400 <= int(status) < 500) or int(status) in (408, 409, 425, 429)
    return False


def _retry_after(exc: BaseException | None) -> float | None:
    """Seconds from a ``Retry-After`` header, if the provider sent one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _describe(exc: BaseException, secrets: Sequence[str]) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return scrub(f"{type(exc).__name__}: {msg}"[:500], secrets) or type(exc).__name__


# ----------------------------------------------------------------------------------------------- JSON


def _reply_value(text: str | None, validator: Any) -> Any:
    """The JSON value of a reply that ``validator`` takes (the last such, as :func:`reply_json` orders them: a
    draft then a final object, or an object followed by a citation like ``[1]``, give the object the validator
    wants); where none does, the value it would read without one, so the validator's own error is the re-ask's."""
    if validator is None:
        return reply_json(text)

    def takes(value: Any) -> bool:
        try:
            _validate(value, validator)
        except Exception:
            return False
        return True

    try:
        return reply_json(text, accept=takes)
    except ValueError:
        return reply_json(text)


def _validate(obj: Any, validator: Any) -> Any:
    if validator is None:
        return obj
    model_validate = getattr(validator, "model_validate", None)
    if model_validate is not None:  # a pydantic model class
        return model_validate(obj)
    return validator(obj)


def rejection_reason(exc: BaseException) -> str:
    """Why a reply was rejected, in one line for the re-ask: a pydantic error's field and message
    (``children[0].question: ...``; its first line alone only says "1 validation error for Children")."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            from benchfill.errors import field_path

            msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            return f"{field_path(tuple(first.get('loc', ())), '')}: {msg}".lstrip(": ")
        except Exception:  # not pydantic's errors(): fall back to the text
            pass
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


REASK = (
    "Your previous reply could not be used: {error}. Reply again with only the JSON requested, "
    "exactly in the form the instructions give, and no text around it."
)


# ----------------------------------------------------------------------------------------------- structured output
#
# A JSON reply is asked for with a ``response_format`` carrying the JSON schema of its pydantic model, in the first
# wire form the provider accepts: ``json_schema`` (OpenAI, vLLM's guided decoding, the llama.cpp C++ server; litellm
# translates it for providers with their own form), else ``json_object`` with a ``schema`` (llama-cpp-python's
# server, which constrains decoding with a grammar built from the schema), else none (today's parse-and-re-ask).
# A form the provider refuses (a 4xx naming it) is remembered per model for the client's life and never sent again.

SCHEMA_FORMS = ("json_schema", "json_object")
_FORMAT_WORDS = re.compile(r"response_format|json_schema|json_object|guided_json|grammar", re.IGNORECASE)
# a server's rejection of the request itself (not a failure while serving it)
_VALIDATION = re.compile(r"validation error|literal_error|input should be|not supported|unsupported|invalid",
                         re.IGNORECASE)


def response_format(schema: Any, form: str = "json_schema") -> dict[str, Any]:
    """The ``response_format`` that asks for JSON matching ``schema`` (a pydantic model class) in wire form
    ``form`` (one of :data:`SCHEMA_FORMS`)."""
    body = schema.model_json_schema()
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": body}}
    if form == "json_object":
        return {"type": "json_object", "schema": body}
    raise ValueError(f"unknown response_format form {form!r} (one of {', '.join(SCHEMA_FORMS)})")


def is_model_class(obj: Any) -> bool:
    """A pydantic model class (its JSON schema can be sent as ``response_format``)."""
    return isinstance(obj, type) and callable(getattr(obj, "model_json_schema", None))


class FormatRefused(Exception):
    """The provider refused the call's ``response_format`` (a final 4xx that names it): the caller asks again in
    the next form, or without one. Raised by :meth:`ModelClient.complete` only for calls that carry one."""


def refuses_format(exc: BaseException) -> bool:
    """An error that refuses the requested ``response_format``: a final one (4xx) that names it, or any that names
    it in a request-validation message (llama-cpp-python's server answers a form it does not know with a 500
    carrying its pydantic validation error: retrying would only repeat it)."""
    text = str(exc)
    if _FORMAT_WORDS.search(text) is None:
        return False
    return not is_retryable(exc) or _VALIDATION.search(text) is not None


# ----------------------------------------------------------------------------------------------- offline worlds


def offline_key(model: str, messages: list[dict[str, Any]], params: Mapping[str, Any], sample_index: int,
                request: "ModelRequest | None") -> str:
    """The key an offline world (simulated, replay) draws a call's randomness from: the cache key of the same call
    worded by the built-in templates, i.e. the request's own messages followed by the turns the conversation added
    after its prompt (a re-ask's rejected reply and reason). With the built-in templates this is the call's cache
    key; with an override template it is still the built-in one's, so a reworded prompt changes what a real model
    reads (and the cache key) but not what an offline model answers. A call without a request draws from its cache
    key."""
    if request is None:
        return call_key(model, messages, params, sample_index)
    # a prompt is a system and a user message; the first assistant turn starts what the conversation added
    added = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return call_key(model, [*request.messages(), *messages[added:]], params, sample_index)


# ----------------------------------------------------------------------------------------------- the client


@dataclass
class _Spec:
    """What the client prepares once per model config: parameters, seed support, semaphore and call function."""

    cfg: ModelConfig
    sampling: dict[str, Any]
    send: dict[str, Any]
    seed_supported: bool
    semaphore: asyncio.Semaphore | None
    call: Callable[[list[dict[str, Any]], dict[str, Any]], Awaitable[Any]] | None
    secrets: list[str]
    structured: bool = False  # the provider takes a response_format (litellm's list of supported parameters)

    def key_params(self, sample_index: int, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        params = dict(self.sampling)
        if extra:
            params.update(extra)
        if self.seed_supported and self.cfg.seed is not None and "seed" not in params:
            params["seed"] = self.cfg.seed + sample_index
        return params


class ModelClient:
    """Async chat calls with a cache, bounded concurrency per model, retries, accounting and a call log.

    Args:
        cache: a :class:`CallCache` or the path of its SQLite file.
        sim: the simulated world that answers ``sim/...`` models.
        vllm: the in-process vLLM backend for ``vllm/...`` models (created on first use when None).
        on_result: called with every :class:`CallResult` (progress bars).
        structured_output: ask for JSON replies with a ``response_format`` (their schema) where the provider takes
            one (False: parse-and-re-ask only, e.g. to measure what the schema buys).

    Use from one event loop. Each call is committed to the cache before ``complete`` returns.
    """

    def __init__(self, cache: CallCache | str | Path, *, sim: "SimWorld | None" = None,
                 vllm: "VLLMBackend | None" = None, on_result: Callable[[CallResult], None] | None = None,
                 structured_output: bool = True) -> None:
        self.cache = cache if isinstance(cache, CallCache) else CallCache(cache)
        self.structured_output = structured_output
        self._refused_forms: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        self.sim = sim
        self._vllm = vllm
        self.on_result = on_result
        self.stats = ClientStats()
        self._specs: dict[int, tuple[ModelConfig, _Spec]] = {}
        self._semaphores: dict[tuple[Any, ...], asyncio.Semaphore] = {}
        self._inflight: dict[str, asyncio.Future[CallResult]] = {}
        self._vllm_lock: asyncio.Lock | None = None
        self._fresh: set[str] = set()

    # ------------------------------------------------------------------------------------------- setup

    def _spec(self, cfg: ModelConfig) -> _Spec:
        entry = self._specs.get(id(cfg))
        if entry is not None and entry[0] is cfg:
            return entry[1]
        spec = self._build_spec(cfg)
        self._specs[id(cfg)] = (cfg, spec)
        return spec

    def _build_spec(self, cfg: ModelConfig) -> _Spec:
        sampling = cfg.sampling_params()
        secrets = secret_values([cfg.api_key_env])
        if cfg.backend != "litellm":
            return _Spec(cfg, sampling, {}, False, None, None, secrets)
        litellm = import_litellm()
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if cfg.api_key_env and not key:
            raise InputError("<config>", f"environment variable {cfg.api_key_env} is not set (needed by {cfg.model})")
        if key is None and cfg.is_local():
            # local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) ignore the key, but litellm's openai/
            # provider refuses to send a request without one; "EMPTY" is vLLM's documented placeholder.
            key = "EMPTY"
        try:
            bare, provider, _, _ = litellm.get_llm_provider(model=cfg.model, api_base=cfg.api_base)
            supported = litellm.get_supported_openai_params(model=bare, custom_llm_provider=provider) or []
        except Exception:
            supported = []
        sem_key = (cfg.model, tuple(cfg.endpoints()))
        semaphore = self._semaphores.setdefault(sem_key, asyncio.Semaphore(cfg.max_concurrency))
        # litellm's own retries are off (max_retries=0): tenacity below owns retrying, so every attempt is logged.
        send: dict[str, Any] = {"timeout": cfg.timeout, "max_retries": 0}
        endpoints = cfg.endpoints()
        if len(endpoints) > 1:
            model_list = [
                {"model_name": cfg.label, "litellm_params": {
                    "model": cfg.model, "api_base": base, "timeout": cfg.timeout, "max_retries": 0,
                    **({"api_key": key} if key else {}),
                }}
                for base in endpoints
            ]
            router = litellm.Router(model_list=model_list, **{"num_retries": 0, "routing_strategy": "simple-shuffle",
                                                              **cfg.router})

            async def call(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
                return await router.acompletion(model=cfg.label, messages=messages, **params)
        else:
            if endpoints:
                send["api_base"] = endpoints[0]
            if key:
                send["api_key"] = key

            async def call(messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
                return await litellm.acompletion(model=cfg.model, messages=messages, **params)

        return _Spec(cfg, sampling, send, "seed" in supported, semaphore, call, secrets,
                     structured="response_format" in supported)

    @property
    def vllm(self) -> "VLLMBackend":
        if self._vllm is None:
            from benchfill.models.vllm_backend import VLLMBackend

            self._vllm = VLLMBackend()
        return self._vllm

    def key_for(self, cfg: ModelConfig, messages: Messages, sample_index: int = 0,
                params: Mapping[str, Any] | None = None) -> str:
        """The cache key :meth:`complete` would use."""
        spec = self._spec(cfg)
        return call_key(cfg.model, messages, spec.key_params(sample_index, params), sample_index)

    def _emit(self, result: CallResult) -> CallResult:
        self.stats.add(result)
        if self.on_result is not None:
            self.on_result(result)
        return result

    # ------------------------------------------------------------------------------------------- calls

    async def complete(self, cfg: ModelConfig, messages: Messages, *, sample_index: int = 0, role: str = "panel",
                       request: "ModelRequest | None" = None, params: Mapping[str, Any] | None = None) -> CallResult:
        """One chat call (rollout ``sample_index``), from the cache when it was made before.

        ``params`` adds per-call parameters (e.g. ``response_format``); they enter the cache key. ``request`` is
        what the messages ask, typed (:mod:`benchfill.models.requests`): the simulated and replay worlds read it
        instead of the messages, the real backends ignore it, and it never enters the key. Failures come back in
        ``.error``, except a refused ``response_format``: :class:`FormatRefused` (see :meth:`complete_structured`).
        """
        spec = self._spec(cfg)
        key_params = spec.key_params(sample_index, params)
        wire = [dict(m) for m in messages]  # plain dicts: what the key hashes and the backends send
        key = call_key(cfg.model, wire, key_params, sample_index)
        hit = self.cache.get(key)
        if hit is not None:
            # a sample that a vLLM batch (prefetch) drew in this session is reported once as a call made now
            fresh = key in self._fresh
            if fresh:
                self._fresh.discard(key)
            return self._emit(CallResult(
                hit.text, hit.tokens_in, hit.tokens_out, hit.cost, hit.latency_s, not fresh, None, key, cfg.model,
                role, sample_index, int(fresh), hit.simulated, finish_reason=hit.finish_reason,
            ))
        pending = self._inflight.get(key)
        if pending is not None:  # the same call is already on its way: share it, never pay twice
            shared = await asyncio.shield(pending)
            return self._emit(replace(shared, cached=True, role=role, attempts=0))
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await self._dispatch(spec, wire, key_params, key, sample_index, role, request)
            future.set_result(result)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # mark retrieved: no "exception never retrieved" warning without waiters
            raise
        finally:
            del self._inflight[key]
        return self._emit(result)

    async def _dispatch(self, spec: _Spec, wire: list[dict[str, Any]], params: dict[str, Any], key: str,
                        sample_index: int, role: str, request: "ModelRequest | None") -> CallResult:
        cfg = spec.cfg
        if cfg.backend == "sim":
            return self._call_sim(cfg, wire, params, key, sample_index, role, request)
        if cfg.backend == "vllm":
            await self._vllm_batch(cfg, [(wire, [sample_index])], role=role, override=params)
            hit = self.cache.get(key)
            if hit is None:  # pragma: no cover - the batch stores every sample or raises
                return CallResult(None, error="vLLM produced no output", key=key, model=cfg.model, role=role)
            self._fresh.discard(key)
            return CallResult(hit.text, hit.tokens_in, hit.tokens_out, 0.0, hit.latency_s, False, None, key,
                              cfg.model, role, sample_index, 1, finish_reason=hit.finish_reason)
        return await self._call_litellm(spec, wire, params, key, sample_index, role)

    def _call_sim(self, cfg: ModelConfig, wire: list[dict[str, Any]], params: dict[str, Any], key: str,
                  sample_index: int, role: str, request: "ModelRequest | None") -> CallResult:
        if self.sim is None:
            raise InputError("<config>", f"{cfg.model} is a simulated model but no simulated world is configured")
        t0 = time.perf_counter()
        text = self.sim.respond(cfg.model, request, key=offline_key(cfg.model, wire, params, sample_index, request),
                                role=role)
        latency = time.perf_counter() - t0
        tokens_in = sum(len(str(m.get("content", ""))) for m in wire) // 4
        tokens_out = len(text) // 4
        self.cache.put(key, model=cfg.model, role=role, sample_index=sample_index, messages=wire, params=params,
                       text=text, tokens_in=tokens_in, tokens_out=tokens_out, cost=0.0, latency_s=latency, attempts=1,
                       simulated=True)
        return CallResult(text, tokens_in, tokens_out, 0.0, latency, False, None, key, cfg.model, role, sample_index,
                          1, True)

    async def _call_litellm(self, spec: _Spec, request: list[dict[str, Any]], params: dict[str, Any], key: str,
                            sample_index: int, role: str) -> CallResult:
        cfg = spec.cfg
        send = {**params, **spec.send}
        # a backstop in case a provider ignores its timeout: the attempt is abandoned and retried
        backstop = cfg.timeout * 1.5 + 1.0
        log = self.cache.log

        def wait(state: RetryCallState) -> float:
            exp = min(cfg.backoff_max, cfg.backoff_initial * 2 ** (state.attempt_number - 1))
            exp += random.uniform(0, cfg.backoff_initial)
            hinted = _retry_after(state.outcome.exception() if state.outcome else None)
            return min(cfg.backoff_max, max(exp, hinted or 0.0))

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self.stats.retries += 1
            log(key, model=cfg.model, role=role, sample_index=sample_index, attempt=state.attempt_number,
                outcome="retry", error=_describe(exc, spec.secrets) if exc else None,
                latency_s=time.perf_counter() - t_attempt)

        formatted = "response_format" in params

        def retryable(exc: BaseException) -> bool:
            return is_retryable(exc) and not (formatted and refuses_format(exc))

        t0 = t_attempt = time.perf_counter()
        attempts = 0
        assert spec.semaphore is not None and spec.call is not None
        async with spec.semaphore:
            try:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(cfg.max_retries + 1), wait=wait, retry=retry_if_exception(retryable),
                    before_sleep=before_sleep, reraise=True,
                ):
                    with attempt:
                        attempts = attempt.retry_state.attempt_number
                        t_attempt = time.perf_counter()
                        async with asyncio.timeout(backstop):
                            response = await spec.call(request, send)
                        text, finish = _response_text(response)
            except Exception as exc:  # recorded and returned, never dropped
                error = _describe(exc, spec.secrets)
                latency = time.perf_counter() - t0
                if formatted and refuses_format(exc):  # the caller asks again in another form
                    log(key, model=cfg.model, role=role, sample_index=sample_index, attempt=attempts,
                        outcome="refused", error=error, latency_s=latency)
                    raise FormatRefused(error) from None
                log(key, model=cfg.model, role=role, sample_index=sample_index, attempt=attempts, outcome="error",
                    error=error, latency_s=latency)
                return CallResult(None, 0, 0, 0.0, latency, False, error, key, cfg.model, role, sample_index, attempts,
                                  failure_kind=classify_failure(exc))
            # the raw reply is committed at once, before the slot is released and before anyone parses or grades
            # it: a kill loses at most the calls in flight (max_concurrency per model)
            latency = time.perf_counter() - t0
            tokens_in, tokens_out = _usage(response)
            cost = _cost(response)
            self.cache.put(key, model=cfg.model, role=role, sample_index=sample_index, messages=request,
                           params=params, text=text, tokens_in=tokens_in, tokens_out=tokens_out, cost=cost,
                           latency_s=latency, attempts=attempts, simulated=False, finish_reason=finish)
        return CallResult(text, tokens_in, tokens_out, cost, latency, False, None, key, cfg.model, role, sample_index,
                          attempts, finish_reason=finish)

    def schema_forms(self, cfg: ModelConfig, schema: Any) -> list[str | None]:
        """The ``response_format`` forms to try for a reply of model ``schema``, in order; None: no format."""
        if schema is None or not self.structured_output or not self._spec(cfg).structured:
            return [None]
        refused = self._refused_forms.get((cfg.model, tuple(cfg.endpoints())), set())
        return [form for form in SCHEMA_FORMS if form not in refused] + [None]

    async def complete_structured(self, cfg: ModelConfig, messages: Messages, schema: Any = None, *,
                                  sample_index: int = 0, role: str = "judge", request: "ModelRequest | None" = None,
                                  params: Mapping[str, Any] | None = None) -> CallResult:
        """:meth:`complete` asking for JSON that matches ``schema`` (a pydantic model class) through
        ``response_format``, in the first form (:data:`SCHEMA_FORMS`) the model accepts; a refused form is
        remembered for the model and the call is made again in the next form, at last without one. Each form is
        its own cache key (the format is part of the request)."""
        forms = self.schema_forms(cfg, schema)
        for form in forms:
            extra = dict(params or {})
            if form is not None:
                extra["response_format"] = response_format(schema, form)
            try:
                return await self.complete(cfg, messages, sample_index=sample_index, role=role, request=request,
                                           params=extra or None)
            except FormatRefused:
                self._refused_forms.setdefault((cfg.model, tuple(cfg.endpoints())), set()).add(str(form))
        raise AssertionError("unreachable: the last form (none) is never refused")  # pragma: no cover

    async def complete_json(self, cfg: ModelConfig, messages: Messages, validator: Any = None, *,
                            sample_index: int = 0, role: str = "judge", max_reasks: int = 2,
                            request: "ModelRequest | None" = None, params: Mapping[str, Any] | None = None,
                            schema: Any = None) -> CallResult:
        """A call whose reply must be JSON accepted by ``validator`` (a callable that returns the value or raises
        ValueError, or a pydantic model class). ``schema`` (a pydantic model class; default: ``validator`` when it
        is one) is sent as ``response_format`` where the provider takes it (:meth:`complete_structured`). A
        rejected reply is re-asked — the conversation plus the reply and the reason — at most ``max_reasks``
        times; ``.parsed`` holds the value, ``.error`` says why there is none. Every re-ask is a cached call of
        its own, so a resumed run replays the same conversation; a re-ask carries the same ``request``."""
        if schema is None and is_model_class(validator):
            schema = validator
        convo = [dict(m) for m in messages]
        result = CallResult(None, error="no call made")
        for round_ in range(max_reasks + 1):
            result = await self.complete_structured(cfg, convo, schema, sample_index=sample_index, role=role,
                                                    request=request, params=params)
            if not result.ok:
                return result
            try:
                return replace(result, parsed=_validate(_reply_value(result.text, validator), validator))
            except Exception as exc:  # ValueError, pydantic.ValidationError, a validator's own error
                reason = scrub(rejection_reason(exc), self._spec(cfg).secrets) or "invalid"
                reason = reason[:300]
                if not result.cached:
                    self.stats.malformed += 1
                    self.cache.log(result.key, model=cfg.model, role=role, sample_index=sample_index,
                                   attempt=round_ + 1, outcome="malformed", error=reason)
                convo = convo + [{"role": "assistant", "content": result.text or ""},
                                 {"role": "user", "content": REASK.format(error=reason)}]
        return replace(result, error=f"malformed output after {max_reasks} re-asks: {reason}", parsed=None)

    async def complete_rollouts(self, cfg: ModelConfig, messages: Messages, *, n: int | None = None,
                                role: str = "panel", request: "ModelRequest | None" = None,
                                params: Mapping[str, Any] | None = None) -> list[CallResult]:
        """All ``n`` (default ``cfg.rollouts``) samples of one prompt; a vLLM model draws them in one batch."""
        n = cfg.rollouts if n is None else n
        if cfg.backend == "vllm":
            await self.prefetch(cfg, [(messages, range(n))], role=role, params=params)
        return list(await asyncio.gather(*(
            self.complete(cfg, messages, sample_index=k, role=role, request=request, params=params) for k in range(n)
        )))

    async def prefetch(self, cfg: ModelConfig, requests: Sequence[tuple[Messages, Sequence[int]]], *,
                       role: str = "panel", params: Mapping[str, Any] | None = None) -> None:
        """Warm the cache for many (messages, sample indices) at once. Only ``vllm/`` models batch (all missing
        rollouts of all prompts through one engine call, one ``n = 1`` request per rollout with seed
        ``cfg.seed + k``); for others this does nothing."""
        if cfg.backend != "vllm":
            return
        await self._vllm_batch(cfg, [([dict(m) for m in msgs], list(ks)) for msgs, ks in requests], role=role,
                               override=params)

    async def _vllm_batch(self, cfg: ModelConfig, requests: Sequence[tuple[list[dict[str, Any]], Sequence[int]]], *,
                          role: str, override: Mapping[str, Any] | None) -> None:
        spec = self._spec(cfg)
        missing: list[tuple[list[dict[str, Any]], list[tuple[int, str]]]] = []
        for msgs, ks in requests:
            todo = []
            for k in ks:
                key = call_key(cfg.model, msgs, spec.key_params(k, override), k)
                if self.cache.get(key) is None:
                    todo.append((k, key))
            if todo:
                missing.append((msgs, todo))
        if not missing:
            return
        if self._vllm_lock is None:
            self._vllm_lock = asyncio.Lock()
        sampling = spec.key_params(0, override)  # no seed here: rollout k is sent seed = cfg.seed + k
        chunk = int(cfg.vllm_engine.get("batch_prompts", 256))
        async with self._vllm_lock:  # one engine (one model) at a time, one batch at a time
            for start in range(0, len(missing), chunk):
                part = missing[start: start + chunk]
                t0 = time.perf_counter()
                outputs = await asyncio.to_thread(
                    self.vllm.generate, cfg, [msgs for msgs, _ in part], [[k for k, _ in todo] for _, todo in part],
                    sampling,
                )
                latency = (time.perf_counter() - t0) / max(1, sum(len(t) for _, t in part))
                for (msgs, todo), outs in zip(part, outputs):
                    for (k, key), out in zip(todo, outs):
                        # each completed chunk is committed at once: a crash loses at most the chunk in progress
                        self.cache.put(key, model=cfg.model, role=role, sample_index=k, messages=msgs,
                                       params=spec.key_params(k, override), text=out.text, tokens_in=out.tokens_in,
                                       tokens_out=out.tokens_out, cost=0.0, latency_s=latency, attempts=1,
                                       simulated=False, finish_reason=out.finish_reason)
                        self._fresh.add(key)

    async def aclose(self) -> None:
        """Release the cache connection (calls already made are committed) and stop litellm's background logging
        task on this loop (else asyncio warns "Task was destroyed but it is pending" at exit)."""
        self.cache.close()
        if self._vllm is not None:
            self._vllm.close()  # ends the engine process: its GPU memory is free for whatever runs next
        if litellm_loaded():
            try:
                from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

                await GLOBAL_LOGGING_WORKER.stop(discard_pending=True, timeout=1.0)
            except Exception:  # pragma: no cover - a litellm internals change must not break shutdown
                pass


# ----------------------------------------------------------------------------------------------- responses


def _response_text(response: Any) -> tuple[str, str | None]:
    """(reply text, finish_reason); a reasoning model's separate reasoning is kept in front as
    <think>...</think>, a refusal is the text. Raises :class:`MalformedReply` (retried) when the reply carries no
    answer: no choices, no message, or null content with no refusal, reasoning or tool call."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedReply("provider reply has no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise MalformedReply("provider reply has a choice without a message")
    finish = getattr(choice, "finish_reason", None)
    finish = str(finish) if finish is not None else None
    content = getattr(message, "content", None)
    reasoning = getattr(message, "reasoning_content", None)
    if content is None:
        refusal = getattr(message, "refusal", None)
        if refusal:
            return str(refusal), finish
        if getattr(message, "tool_calls", None):
            return "", finish
        if not reasoning and finish != "length":
            raise MalformedReply("provider reply has null content (and no refusal)")
        content = ""
    if reasoning:
        return f"<think>{reasoning}</think>{content}", finish
    return str(content), finish


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return 0, 0
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


def _cost(response: Any) -> float:
    """litellm's cost for the response; 0.0 when the model is not in its cost map (local / custom models)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is not None:
        return float(cost)
    return 0.0


# ----------------------------------------------------------------------------------------------- sync wrapper


class SyncModelClient:
    """The same client for synchronous code: its own event loop runs in a background thread.

    Example::

        with SyncModelClient("runs/x/calls.sqlite") as client:
            result = client.complete(cfg, [{"role": "user", "content": "2+2?"}])
    """

    def __init__(self, cache: CallCache | str | Path, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="benchfill-client", daemon=True)
        self._thread.start()
        self.client: ModelClient = self._run(self._make(cache, kwargs))

    @staticmethod
    async def _make(cache: CallCache | str | Path, kwargs: dict[str, Any]) -> ModelClient:
        return ModelClient(cache, **kwargs)

    def _run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run any coroutine that uses ``self.client`` on the client's loop (e.g. a batch under ``asyncio.gather``)."""
        return self._run(coro)

    def complete(self, cfg: ModelConfig, messages: Messages, **kwargs: Any) -> CallResult:
        return self._run(self.client.complete(cfg, messages, **kwargs))

    def complete_json(self, cfg: ModelConfig, messages: Messages, validator: Any = None, **kwargs: Any) -> CallResult:
        return self._run(self.client.complete_json(cfg, messages, validator, **kwargs))

    def complete_rollouts(self, cfg: ModelConfig, messages: Messages, **kwargs: Any) -> list[CallResult]:
        return self._run(self.client.complete_rollouts(cfg, messages, **kwargs))

    @property
    def stats(self) -> ClientStats:
        return self.client.stats

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self.client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> "SyncModelClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
