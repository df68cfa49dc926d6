"""Why a model call failed, typed: the kinds a command's one-line stop message names, classified once from the
exception when the call fails (never parsed back out of its error text). Light on purpose (no tenacity, litellm
only when classifying): grading and every caller import it without the LLM extra's transport stack."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Sequence

from benchfill.models.config import import_litellm


class MalformedReply(Exception):
    """A 2xx reply that carries no answer: no choices, a choice without a message, or null content where the model
    did not refuse. Retried like a 5xx (a proxy or server hiccup), never stored."""


class FailureKind(StrEnum):
    """Why a call failed for a reason that is not the model's answer; the value is what the one-line stop message
    says. Classified from the exception when the call fails (:func:`classify_failure`), never from its text."""

    MALFORMED = "malformed provider replies"
    RATE_LIMITED = "rate limited"
    TIMED_OUT = "timed out"
    UNREACHABLE = "server unreachable"
    SERVER_ERROR = "server errors"
    AUTH = "authentication failed"
    REJECTED = "request rejected"
    JUDGE = "grading judge unusable"
    OTHER = "call failed"


@dataclass(frozen=True)
class CallFailure:
    """One failed call (or failed grading judge): its kind and its error line."""

    kind: FailureKind
    error: str


def _transport_kind(exc: BaseException) -> FailureKind | None:
    """Timed out or unreachable, for a transport exception (asyncio, httpx, openai's and aiohttp's types)."""
    import httpx

    openai = sys.modules.get("openai")
    aiohttp = sys.modules.get("aiohttp")
    timeouts: tuple[type, ...] = (asyncio.TimeoutError, TimeoutError, httpx.TimeoutException)
    if openai is not None:
        timeouts += (openai.APITimeoutError,)
    if isinstance(exc, timeouts):
        return FailureKind.TIMED_OUT
    unreachable: tuple[type, ...] = (ConnectionError, httpx.TransportError)
    if openai is not None:
        unreachable += (openai.APIConnectionError,)
    if aiohttp is not None:
        unreachable += (aiohttp.ClientConnectionError,)
    return FailureKind.UNREACHABLE if isinstance(exc, unreachable) else None


def classify_failure(exc: BaseException) -> FailureKind:
    """The kind of a call's final exception, by the types of its chain and its HTTP status. A transport failure
    anywhere in the chain (litellm reports a refused or cut connection as a 500 whose cause is openai's
    ``APIConnectionError``) decides; then the outer exception's type and status."""
    if isinstance(exc, MalformedReply):
        return FailureKind.MALFORMED
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if (kind := _transport_kind(link)) is not None:
            return kind
        link = link.__cause__ or link.__context__
    litellm = import_litellm()

    def of(*names: str) -> tuple[type, ...]:
        return tuple(t for name in names if isinstance(t := getattr(litellm, name, None), type))

    raw = getattr(exc, "status_code", None)
    status = int(raw) if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()) else None
    if isinstance(exc, of("RateLimitError")) or status == 429:
        return FailureKind.RATE_LIMITED
    if isinstance(exc, of("Timeout")) or status == 408:
        return FailureKind.TIMED_OUT
    if isinstance(exc, of("AuthenticationError", "PermissionDeniedError")) or status in (401, 403):
        return FailureKind.AUTH
    if isinstance(exc, of("APIConnectionError")):
        return FailureKind.UNREACHABLE
    # litellm's async path re-raises openai's APIConnectionError as a 500 of its own, with no cause and a made-up
    # response: only openai's message ("Connection error.") is left of the lost connection
    if isinstance(exc, of("InternalServerError")) and "Connection error" in str(getattr(exc, "message", "")):
        return FailureKind.UNREACHABLE
    if isinstance(exc, of("InternalServerError", "ServiceUnavailableError", "BadGatewayError")) or (
            status is not None and status >= 500):
        return FailureKind.SERVER_ERROR
    if isinstance(exc, of("BadRequestError", "NotFoundError", "UnprocessableEntityError",
                          "ContentPolicyViolationError", "UnsupportedParamsError")) or (
            status is not None and 400 <= status < 500):
        return FailureKind.REJECTED
    if isinstance(exc, of("APIError")):  # a generic API error without a status: a 2xx body that was not JSON
        return FailureKind.SERVER_ERROR
    return FailureKind.OTHER


class CallsFailed(RuntimeError):
    """Calls failed for reasons that are not the model's answer (server down, timeouts, 5xx after every retry).
    Their absence is never recorded as an outcome: the command stops with this one line and a rerun retries them
    (every successful call is already in the cache)."""

    def __init__(self, failures: Sequence[CallFailure], hint: str = "rerun with --resume") -> None:
        self.n = len(failures)
        self.kinds = Counter(f.kind for f in failures)
        self.kind = ", ".join(k.value for k, _ in self.kinds.most_common(2))
        self.first = next((f.error for f in failures if f.error), None)
        super().__init__(f"{self.n} call{'s' if self.n != 1 else ''} failed ({self.kind}); {hint}")


__all__ = ["CallFailure", "CallsFailed", "FailureKind", "MalformedReply", "classify_failure"]
