"""Run configuration: which model plays which role, with what parameters, read from TOML (or YAML).

A config names roles — ``rewriter``, ``judge``, ``panel`` (a list), ``grader`` — each a :class:`ModelConfig`
(a litellm model string plus sampling parameters, rollouts, endpoint and limits). API keys are never written in
the file: a role names the environment variable that holds its key (``api_key_env``).

Model strings, by prefix:

- ``sim/<name>``: the offline simulated world (:mod:`benchfill.models.sim`); no key, no network.
- ``vllm/<hf-model-or-path>``: the in-process vLLM engine (:mod:`benchfill.models.vllm_backend`, optional extra).
- anything else: a litellm model string (``openai/...``, ``anthropic/...``, ``hosted_vllm/...`` with
  ``api_base``); ``api_bases = [...]`` puts several servers of the same model behind a litellm Router.

:func:`load_config` turns every problem (syntax, unknown field, wrong type) into one
:class:`~benchfill.errors.InputError` naming the file and the field; :func:`validate_config` then checks, before
any call is made, that litellm can map each provider and that each needed API key is in the environment.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import tomllib
from pathlib import Path
from typing import Any, Iterator, Literal, NamedTuple
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchfill.errors import InputError, did_you_mean, field_path, install_hint

Role = Literal["rewriter", "judge", "panel", "grader"]
ROLES: tuple[Role, ...] = ("rewriter", "judge", "panel", "grader")

# Fields that change where or how patiently a call is made, never what the model answers: they stay out of the
# cache key, so moving a server to another port or raising a timeout does not invalidate finished work.
TRANSPORT_FIELDS = frozenset(
    {"name", "api_base", "api_bases", "api_key_env", "timeout", "max_retries", "max_concurrency", "backoff_initial",
     "backoff_max", "rollouts", "vllm_engine", "router"}
)
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "host.docker.internal"}


class ModelConfig(BaseModel):
    """One model in one role: what to call and how.

    Attributes:
        model: litellm model string (``openai/gpt-5.4``, ``hosted_vllm/Qwen/QwQ-32B``), ``sim/<name>`` or
            ``vllm/<hf-model-or-path>``.
        name: the label in outputs (the response file's ``model`` column); defaults to ``model``.
        temperature, top_p, max_tokens: sampling parameters sent with every call (omitted when unset).
        seed: base seed; sample ``k`` of a rollout is sent ``seed + k`` where the provider accepts a seed.
        rollouts: answers drawn per item (the panel's ``n_trials``).
        params: any further litellm / provider parameters (``reasoning_effort``, ``top_k``, ``extra_body``...).
        api_base: the endpoint (a vLLM server: ``http://host:8000/v1``).
        api_bases: several endpoints serving the same model; calls are spread by a litellm Router.
        api_key_env: the environment variable holding the API key (never the key itself).
        timeout: seconds per attempt.
        max_retries: retries after the first attempt on 429 / timeout / 5xx / connection errors.
        backoff_initial, backoff_max: exponential backoff bounds, in seconds.
        max_concurrency: calls in flight at once for this model.
        router: extra litellm Router arguments (``routing_strategy``...), used with ``api_bases``.
        vllm_engine: engine arguments for ``vllm/`` models (``tensor_parallel_size``, ``gpu_memory_utilization``...).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    name: str | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    seed: int | None = 0
    rollouts: int = Field(default=1, ge=1)
    params: dict[str, Any] = Field(default_factory=dict)
    api_base: str | None = None
    api_bases: list[str] = Field(default_factory=list)
    api_key_env: str | None = None
    timeout: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=5, ge=0)
    backoff_initial: float = Field(default=1.0, ge=0)
    backoff_max: float = Field(default=60.0, ge=0)
    max_concurrency: int = Field(default=8, ge=1, le=4096)
    router: dict[str, Any] = Field(default_factory=dict)
    vllm_engine: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _model_nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("model string is empty")
        return v

    @model_validator(mode="after")
    def _backoff_ordered(self) -> "ModelConfig":
        if self.backoff_max < self.backoff_initial:
            raise ValueError(f"backoff_max: must be >= backoff_initial ({self.backoff_initial})")
        return self

    @field_validator("params")
    @classmethod
    def _no_secret_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        from benchfill.models.cache import is_secret_name

        for key in v:
            if is_secret_name(key):
                raise ValueError(f"{key}: secrets do not belong in the config; use api_key_env")
        return v

    @property
    def label(self) -> str:
        """The name used in outputs."""
        return self.name or self.model

    @property
    def backend(self) -> Literal["sim", "vllm", "litellm"]:
        if self.model.startswith("sim/"):
            return "sim"
        if self.model.startswith("vllm/"):
            return "vllm"
        return "litellm"

    @property
    def is_simulated(self) -> bool:
        return self.backend == "sim"

    def endpoints(self) -> list[str]:
        """Every configured endpoint (``api_base`` first)."""
        return [b for b in ([self.api_base] if self.api_base else []) + list(self.api_bases) if b]

    def is_local(self) -> bool:
        """All endpoints are on this machine (a local vLLM / Ollama server needs no key)."""
        ends = self.endpoints()
        return bool(ends) and all((urlparse(e).hostname or "") in _LOCAL_HOSTS for e in ends)

    def sampling_params(self) -> dict[str, Any]:
        """What the model is asked with (enters the cache key): sampling fields plus ``params``; unset omitted."""
        out: dict[str, Any] = {}
        for key in ("temperature", "top_p", "max_tokens"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.params)
        return out


class SimConfig(BaseModel):
    """The offline simulated world (``sim/...`` models); see :class:`benchfill.models.sim.SimWorld`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    abilities: dict[str, float] = Field(default_factory=dict)
    difficulties: dict[str, float] = Field(default_factory=dict)
    step: float = Field(default=0.5, ge=0, le=1)
    noise: float = Field(default=0.3, ge=0)
    scatter: float = Field(default=0.8, ge=0)
    invalid_rate: float = Field(default=0.1, ge=0, le=1)
    format_failure_rate: float = Field(default=0.0, ge=0, le=1)
    b_range: tuple[float, float] | None = None
    # world = "replay" (benchfill/models/replay.py): the panel replays the real pass rates of the response file (a
    # high-rollout matrix), the rewriter proposes its held-out real items; the benchmark is the rest, thinned to
    # `rollouts` answers per cell (0: as given)
    world: Literal["irt", "replay"] = "irt"
    holdout: float = Field(default=0.2, gt=0, le=0.5)
    rollouts: int = Field(default=8, ge=0, le=100_000)

    @model_validator(mode="after")
    def _range_ordered(self) -> "SimConfig":
        if self.b_range is not None and not self.b_range[0] < self.b_range[1]:
            raise ValueError("b_range: must be [low, high] with low < high")
        return self


class Confirmation(NamedTuple):
    """How a gap's chosen child is confirmed (README: BenchFill, confirmation).

    Attributes:
        finalists: children raced (successive halving; 1: the search's best alone).
        max_rollouts: answers per panel model a finalist may reach (0: no confirmation).
        budget: panel calls the gap may spend, search + confirmation: a number (0: no limit), or ``"equal"``, what
            full labelling would have spent on the rounds the search ran (:func:`benchfill.graphs.policy.gap_call_budget`).
    """

    finalists: int
    max_rollouts: int
    budget: int | Literal["equal"]


#: Each labelling's confirmation where the config leaves it unset. Full labelling keeps the paper's setting (the
#: search's best child alone). Adaptive labelling spends what its search saved on the result: four finalists raced,
#: up to what full labelling would have spent on the same rounds (README: "Racing at a capped budget").
CONFIRMATION_DEFAULTS: dict[str, Confirmation] = {
    "full": Confirmation(finalists=1, max_rollouts=32, budget=0),
    "adaptive": Confirmation(finalists=4, max_rollouts=128, budget="equal"),
}


class FillParams(BaseModel):
    """The ``[fill]`` section: the BenchFill search's parameters, with the paper's defaults (README: BenchFill).
    Every field is typed and ranged; a wrong one stops the command before any call (exit 2, one line)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    parents: int = Field(default=4, ge=1, le=64)
    children_per_parent: int = Field(default=4, ge=1, le=64)
    references: int = Field(default=16, ge=0, le=256)
    tolerance: float = Field(default=0.01, ge=0, le=1)  # on the normalised axis d
    max_rounds: int = Field(default=8, ge=1, le=1000)
    # decisions by posterior probability: a gap is "filled" when its chosen child's P(d inside the gap)
    # reaches fill_level; the search stops when the best child's P(|d - t| <= tolerance) does, or after `patience`
    # rounds in a row that raised it by less than min_gain (or at max_rounds)
    fill_level: float = Field(default=0.9, gt=0, lt=1)
    patience: int = Field(default=2, ge=1, le=1000)
    min_gain: float = Field(default=0.02, ge=0, le=1)
    # confirmation: the chosen child answered confirm_step more times by every panel model, step after step, until
    # P(inside) reaches fill_level or each model has answered it confirm_max_rollouts times (0: no confirmation)
    confirm_step: int = Field(default=4, ge=1, le=1000)
    # the next three, where unset (None), are the labelling's (CONFIRMATION_DEFAULTS; `confirmation` resolves them)
    confirm_max_rollouts: int | None = Field(default=None, ge=0, le=100_000)
    # racing: the confirm_finalists children most likely within tolerance are confirmed together, the weaker half
    # dropped after each step (successive halving), so the choice is made among well-measured children
    confirm_finalists: int | None = Field(default=None, ge=1, le=16)
    # panel calls one gap may spend, search + confirmation (0: no limit; "equal": what full labelling would have
    # spent on the rounds the search ran, policy.gap_call_budget): confirmation stops before a step that would pass it
    gap_call_budget: int | Literal["equal"] | None = None
    seed_items: int = Field(default=16, ge=1)
    sequential: bool = True  # recompute the gaps after each filled gap (else: a fixed list from the start)
    display_scale: float = Field(default=10.0, gt=0)  # difficulties shown to the rewriter on 0-10, not 0-1
    sim_panel_rollouts: int = Field(default=4, ge=1, le=1000)  # simulated world only: answers per model and child
    # labelling: "full" = every panel model answers every valid child `rollouts` times (the paper);
    # "adaptive" = small batches from the most informative models, exact posterior after each, children stop when
    # decided (benchfill/graphs/adaptive.py has the rule); per-child cap = the full panel's answers
    labelling: Literal["full", "adaptive"] = "full"
    adaptive_batch: int = Field(default=4, ge=1, le=1000)  # answers per child per step
    adaptive_min_answers: int = Field(default=8, ge=1, le=100_000)  # answers before a child may be dropped
    adaptive_z: float = Field(default=1.645, gt=0, le=10)  # interval = mean +- z SD (1.645: 90 %)
    adaptive_precision: float = Field(default=0.02, ge=0, le=1)  # stop a child whose z SD on d is <= this
    adaptive_budget: float = Field(default=0.4, gt=0, le=1)  # a round's answers, share of full labelling's
    # a model answers a child <= this x its rollouts; 1: adaptive asks a subset of full labelling's calls
    adaptive_rollout_factor: int = Field(default=1, ge=1, le=100)
    # text pre-screen (adaptive only; benchfill/graphs/prescreen.py): a ridge on the benchmark's own items' texts and
    # b predicts each child's b; it orders the screening and picks a child's first models, never its placement.
    # "hash": hashed n-grams (no extra dependency); "minilm": sentence embeddings (pip install 'benchfill[prescreen]')
    prescreen: Literal["off", "hash", "minilm"] = "off"

    @model_validator(mode="after")
    def _prescreen_needs_adaptive(self) -> "FillParams":
        if self.prescreen != "off" and self.labelling != "adaptive":
            raise ValueError('prescreen: orders adaptive labelling; set labelling = "adaptive" or prescreen = "off"')
        return self

    @field_validator("gap_call_budget", mode="plain")
    @classmethod
    def _budget_is_calls_or_equal(cls, v: Any) -> int | Literal["equal"] | None:
        if v is None or v == "equal" or (type(v) is int and v >= 0):
            return v
        raise ValueError(f'must be an integer >= 0 or "equal" (got {v!r})')

    @property
    def children_per_round(self) -> int:
        return self.parents * self.children_per_parent

    @property
    def confirmation(self) -> Confirmation:
        """The confirmation's settings as they apply: the config's, and its labelling's defaults where unset."""
        default = CONFIRMATION_DEFAULTS[self.labelling]
        return Confirmation(
            finalists=default.finalists if self.confirm_finalists is None else self.confirm_finalists,
            max_rollouts=default.max_rollouts if self.confirm_max_rollouts is None else self.confirm_max_rollouts,
            budget=default.budget if self.gap_call_budget is None else self.gap_call_budget)

    @property
    def with_full_labelling(self) -> "FillParams":
        """These settings with full labelling (the paper's): the arm an ``"equal"`` budget is measured against."""
        return self.model_copy(update={"labelling": "full", "prescreen": "off"})


def apply_role_defaults(data: Any, roles: tuple[str, ...], role_lists: tuple[str, ...]) -> Any:
    """Merge a config's ``[defaults]`` table into every role table (a role's own value wins) and drop it."""
    if not isinstance(data, dict) or "defaults" not in data:
        return data
    data = dict(data)
    defaults = data.pop("defaults") or {}
    if not isinstance(defaults, dict):
        raise ValueError("defaults must be a table")

    def merge(role: Any) -> Any:
        return {**defaults, **role} if isinstance(role, dict) else role

    for role in roles:
        if role in data:
            data[role] = merge(data[role])
    for role in role_lists:
        if isinstance(data.get(role), list):
            data[role] = [merge(m) for m in data[role]]
    return data


class RunConfig(BaseModel):
    """A whole run: the four roles, prompt overrides, the simulated world and the search's own section.

    ``defaults`` (a table) fills every role's missing fields, so a 12-model panel need not repeat
    ``api_base`` or ``timeout``. ``fill`` holds the BenchFill search's parameters (:class:`FillParams`).
    """

    model_config = ConfigDict(extra="forbid")

    rewriter: ModelConfig | None = None
    judge: ModelConfig | None = None
    panel: list[ModelConfig] = Field(default_factory=list)
    grader: ModelConfig | None = None
    prompts: dict[str, str] = Field(default_factory=dict)
    sim: SimConfig | None = None
    fill: FillParams = Field(default_factory=FillParams)
    seed: int = 0
    source: str = "<memory>"

    @model_validator(mode="before")
    @classmethod
    def _apply_defaults(cls, data: Any) -> Any:
        return apply_role_defaults(data, ("rewriter", "judge", "grader"), ("panel",))

    @model_validator(mode="after")
    def _unique_panel_names(self) -> "RunConfig":
        seen: set[str] = set()
        for k, cfg in enumerate(self.panel):
            if cfg.label in seen:
                raise ValueError(f"panel[{k}]: duplicate panel model name {cfg.label!r} (set a distinct 'name')")
            seen.add(cfg.label)
        return self

    def roles(self) -> Iterator[tuple[str, ModelConfig]]:
        """Every configured model with its place in the file (``panel[3]``, ``judge``)."""
        for role in ("rewriter", "judge", "grader"):
            cfg = getattr(self, role)
            if cfg is not None:
                yield role, cfg
        for k, cfg in enumerate(self.panel):
            yield f"panel[{k}]", cfg

    def role(self, name: str) -> ModelConfig:
        """The model of a single-model role (``rewriter``, ``judge``, ``grader``); one that is not configured ->
        InputError (naming the file)."""
        model: ModelConfig | None = getattr(self, name)
        if model is None:
            raise InputError(self.source, f"{name}: this command needs a [{name}] model")
        return model

    @property
    def simulated(self) -> bool:
        """Any role is played by the simulated world (every output must then say SIMULATED)."""
        return any(cfg.is_simulated for _, cfg in self.roles())

    def prompt_overrides(self) -> tuple[Path | None, dict[str, Path]]:
        """(folder of override templates, {template name: file}) with paths resolved against the config file."""
        return resolve_prompt_overrides(self.prompts, self.source)


def resolve_prompt_overrides(prompts: dict[str, str], source: str) -> tuple[Path | None, dict[str, Path]]:
    """A config's ``[prompts]`` table -> (override folder from ``dir``, {template name: file}), relative paths
    resolved against the config file's folder."""
    base = Path(source).parent if source != "<memory>" else Path.cwd()
    folder = None
    files: dict[str, Path] = {}
    for key, value in prompts.items():
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base / path
        if key == "dir":
            folder = path
        else:
            files[key] = path
    return folder, files


# ----------------------------------------------------------------------------------------------- loading


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "config file not found") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read config ({exc.__class__.__name__})") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(
                str(path), f"invalid YAML ({getattr(exc, 'problem', exc)})", row=mark.line + 1 if mark else None
            ) from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(str(path), f"invalid TOML ({exc})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(str(path), "config must be a table / mapping at the top level")
    return data


def _reject_inline_keys(path: Path, data: Any, where: str = "") -> None:
    """API keys come from the environment only: refuse ``api_key = "sk-..."`` anywhere in the file."""
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{where}.{key}" if where else str(key)
            if str(key).lower() in ("api_key", "apikey", "openai_api_key", "key"):
                raise InputError(
                    str(path), f"{here}: API keys must not be written in the config; set api_key_env = \"VAR_NAME\""
                )
            _reject_inline_keys(path, value, here)
    elif isinstance(data, list):
        for k, value in enumerate(data):
            _reject_inline_keys(path, value, f"{where}[{k}]")


def load_config(path: str | Path) -> RunConfig:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) run config; every problem -> one InputError."""
    path = Path(path)
    data = _read_mapping(path)
    for role in ("rewriter", "judge", "grader", "panel", "defaults"):
        if role in data:
            _reject_inline_keys(path, data[role], role)
    _check_defaults(path, data.get("defaults"))
    return config_from_dict(data, source=str(path))


def _check_defaults(path: Path, defaults: Any) -> None:
    """A typo in ``[defaults]`` is reported on ``[defaults]`` (it would otherwise surface on every role it was
    merged into, as ``rewriter.rolouts``)."""
    if not isinstance(defaults, dict):
        return
    fields = set(ModelConfig.model_fields)
    for key in defaults:
        if key not in fields:
            raise InputError(str(path), f"[defaults].{key}: unknown field{did_you_mean(key, sorted(fields))}")


def config_from_dict(data: dict[str, Any], source: str = "<memory>") -> RunConfig:
    """Build a :class:`RunConfig` from a mapping (what a TOML / YAML file holds); the first problem -> one
    InputError line naming the field as written: ``[fill].parents: must be >= 1``."""
    try:
        return RunConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise config_error(source, exc) from None


_SECTIONS = {"rewriter", "judge", "grader", "sim", "fill", "prompts", "defaults"}
_BOUNDS = (("greater than or equal to", ">="), ("less than or equal to", "<="), ("greater than", ">"),
           ("less than", "<"))


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed where an unknown one was found (for "did you mean")."""
    if len(loc) <= 1:
        return [f for f in RunConfig.model_fields if f != "source"]
    sections: dict[str, type[BaseModel]] = {"fill": FillParams, "sim": SimConfig}
    section = sections.get(str(loc[0]), ModelConfig)
    return list(section.model_fields)


def config_error(source: str, exc: ValidationError) -> InputError:
    """A config's first validation error as one line: the field (``[fill].parents``, ``panel[3].temperature``)
    and the rule in plain words (``must be >= 1``, ``must be an integer (got 'four')``)."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    where = field_path(loc)
    if loc and loc[0] in _SECTIONS:
        rest = field_path(loc[1:], top="")
        where = f"[{loc[0]}]" + (f".{rest}" if rest and not rest.startswith("[") else rest)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    kind = str(err.get("type", ""))
    got = err.get("input")
    for phrase, op in _BOUNDS:
        if msg.startswith(f"Input should be {phrase} "):
            msg = f"must be {op} {msg.removeprefix(f'Input should be {phrase} ')}"
            break
    else:
        if kind == "extra_forbidden":
            msg = "unknown field" + did_you_mean(str(loc[-1]) if loc else "", _known_fields(loc))
        elif kind == "missing":
            msg = "required, missing"
        elif kind.startswith(("int_", "float_", "bool_", "string_", "dict_", "list_", "tuple_")):
            want = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
                    "dict": "a table", "list": "a list", "tuple": "a list"}[kind.split("_")[0]]
            msg = f"must be {want} (got {got!r})" if not isinstance(got, (dict, list)) else f"must be {want}"
    return InputError(str(source), f"{where}: {msg}")


# ----------------------------------------------------------------------------------------------- validation


_LITELLM: Any = None
_LITELLM_LOCK = threading.Lock()


def import_litellm() -> Any:
    """Import litellm once, offline and quiet: the bundled cost map (no download), no debug banners."""
    global _LITELLM
    if _LITELLM is None:
        with _LITELLM_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                if hasattr(litellm, "telemetry"):
                    litellm.telemetry = False
                _LITELLM = litellm
    return _LITELLM


def litellm_loaded() -> bool:
    """Whether :func:`import_litellm` has run in this process (shutdown stops litellm's logger only then)."""
    return _LITELLM is not None




def _litellm_provider(model: str, api_base: str | None) -> str:
    """The provider litellm maps ``model`` to; raises ValueError when it cannot."""
    litellm = import_litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception as exc:  # litellm raises BadRequestError for an unmappable string
        raise ValueError(str(exc).splitlines()[0]) from None
    return provider


def validate_model(cfg: ModelConfig, where: str, source: str, sim: SimConfig | None = None) -> None:
    """Check one role's model can be called, without calling it: provider known, key present, extras installed."""
    if cfg.backend == "sim":
        name = cfg.model.removeprefix("sim/")
        if not name:
            raise InputError(source, f"{where}.model: 'sim/' needs a name (sim/<name>)")
        if where.startswith("panel") and (sim is None or name not in sim.abilities):
            raise InputError(
                source, f"{where}.model: simulated panel model {cfg.model!r} has no ability; add it under [sim.abilities]"
            )
        return
    if cfg.backend == "vllm":
        if not cfg.model.removeprefix("vllm/"):
            raise InputError(source, f"{where}.model: 'vllm/' needs a model name or path (vllm/<hf-model-or-path>)")
        from benchfill.models.vllm_backend import check_vllm_config

        check_vllm_config(cfg, where, source)
        if importlib.util.find_spec("vllm") is None:
            raise InputError(
                source, f"{where}.model: {cfg.model!r} needs the in-process vLLM engine: {install_hint('vllm')}"
            )
        return
    for base in cfg.endpoints():
        parsed = urlparse(base)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InputError(source, f"{where}.api_base: {base!r} is not an http(s) URL")
    try:
        provider = _litellm_provider(cfg.model, cfg.api_base)
    except ValueError:
        raise InputError(
            source,
            f"{where}.model: unknown model string {cfg.model!r}: litellm cannot map its provider "
            "(write it as provider/model, e.g. openai/gpt-4o, hosted_vllm/<model> with api_base, sim/<name>)",
        ) from None
    if cfg.api_key_env:
        if not os.environ.get(cfg.api_key_env):
            raise InputError(
                source, f"{where}.api_key_env: environment variable {cfg.api_key_env} is not set (needed by {cfg.model})"
            )
        return
    if cfg.is_local() or provider in ("hosted_vllm", "ollama", "ollama_chat", "lm_studio", "llamafile"):
        return  # a local server: no key needed
    try:
        env = import_litellm().validate_environment(model=cfg.model, api_base=cfg.api_base)
    except Exception:  # pragma: no cover - litellm could not tell; let the call report it
        return
    missing = [k for k in env.get("missing_keys", []) if "KEY" in k.upper() or "TOKEN" in k.upper()]
    if missing:
        raise InputError(
            source,
            f"{where}: {cfg.model} needs an API key: set {missing[0]} in the environment "
            f"(or name another variable with api_key_env)",
        )


def validate_config(cfg: RunConfig, need: tuple[str, ...] = ("panel",)) -> None:
    """Check every role that the command will use (``need``: ``panel``, ``rewriter``, ``judge``, ``grader``) can be
    called; the first problem -> InputError.

    Runs before any model call, so a typo in a model string or a missing key costs nothing.
    """
    for role in need:
        if role == "panel" and not cfg.panel:
            raise InputError(cfg.source, "panel: no panel models configured (add [[panel]] tables)")
        if role != "panel":
            cfg.role(role)  # raises for one not configured
    for where, model in cfg.roles():
        if where.split("[")[0] in need:
            validate_model(model, where, cfg.source, cfg.sim)
