"""Prompt templates: plain-text files a user can read and swap (benchfill/models/README.md), rendered with ``string.Template``.

The built-in templates live in ``benchfill/prompts/<name>.txt`` and use ``$name`` placeholders (``$$`` is a
literal dollar sign; LaTeX braces need no escaping). A config overrides them per name or by folder::

    [prompts]
    dir = "my_prompts"                  # any <name>.txt here replaces the built-in one
    rewrite = "prompts/my_rewrite.txt"  # a single template by name

An optional ``<name>.system.txt`` next to a template becomes a system message.

Built-in names: ``answer_mcq``, ``answer_math``, ``answer_numeric``, ``answer_short``, ``answer_open`` (answering,
by item format), ``rewrite`` (the BenchFill rewriter: target on a 0-10 scale, parent, up to 16 references,
children as JSON), ``rewrite_blind`` (the budget-matched baseline: no difficulty feedback), ``validity_judge``
(well posed + reference answer correct, JSON verdict) and ``grade_judge`` (rubric grading, JSON {label, score}).

A template is only the wording of a call: what the call asks is its typed request (:mod:`benchfill.models.requests`),
which renders itself with these functions (``request.messages(library)``) and is what the offline worlds read.
"""

from __future__ import annotations

import hashlib
import string
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from benchfill.data import OPTION_LETTERS, Item
from benchfill.errors import InputError

BUILTIN_DIR = Path(str(resources.files("benchfill"))) / "prompts"
ANSWER_TEMPLATE = {
    "mcq": "answer_mcq", "numeric": "answer_numeric", "math": "answer_math", "short": "answer_short",
    "structured": "answer_structured", "open": "answer_open",
}
DEFAULT_RUBRIC = "The response is correct if its final answer means the same as the reference answer."
MAX_REFERENCES = 16
LETTERS = OPTION_LETTERS  # option letters, in order


class PromptLibrary:
    """Templates by name: a per-name override, else the override folder, else the built-in file.

    Args:
        folder: a folder of ``<name>.txt`` files that shadow the built-in ones.
        files: ``{name: path}`` single-template overrides.
        source: where the overrides were named (the config file), for error messages.
    """

    def __init__(self, folder: Path | None = None, files: Mapping[str, Path] | None = None,
                 source: str = "<prompts>") -> None:
        self.folder = Path(folder) if folder else None
        self.files = {k: Path(v) for k, v in (files or {}).items()}
        self.source = source
        self._cache: dict[Path, str] = {}

    @classmethod
    def from_config(cls, cfg: Any) -> "PromptLibrary":
        """From a :class:`~benchfill.models.config.RunConfig`'s ``[prompts]`` section; checks every path now."""
        folder, files = cfg.prompt_overrides()
        lib = cls(folder, files, source=cfg.source)
        lib.check()
        return lib

    def check(self) -> None:
        """Every override exists and parses as a template (before any model call)."""
        if self.folder is not None and not self.folder.is_dir():
            raise InputError(self.source, f"prompts.dir: folder {self.folder} not found")
        for name, path in self.files.items():
            if not path.is_file():
                raise InputError(self.source, f"prompts.{name}: template file {path} not found")
            self._parse(name)

    def overrides_digest(self) -> str | None:
        """A digest of every override template's name and text (None without overrides): what a run's resume
        fingerprint holds, so that editing an override is a different run."""
        names = set(self.files)
        if self.folder is not None:
            names |= {p.stem for p in self.folder.glob("*.txt")}
        if not names:
            return None
        h = hashlib.sha256()
        for name in sorted(names):
            h.update(f"{name}\0{self.text(name)}\0".encode())
        return h.hexdigest()[:16]

    def path(self, name: str) -> Path:
        """The file that template ``name`` is read from."""
        if name in self.files:
            return self.files[name]
        if self.folder is not None and (self.folder / f"{name}.txt").is_file():
            return self.folder / f"{name}.txt"
        builtin = BUILTIN_DIR / f"{name}.txt"
        if not builtin.is_file():
            raise InputError(self.source, f"unknown prompt template {name!r} (no {builtin.name} anywhere)")
        return builtin

    def text(self, name: str) -> str:
        path = self.path(name)
        if path not in self._cache:
            self._cache[path] = path.read_text(encoding="utf-8")
        return self._cache[path]

    def _parse(self, name: str) -> string.Template:
        tpl = string.Template(self.text(name))
        if not tpl.is_valid():
            raise InputError(str(self.path(name)), "invalid template: a '$' must start $name or be written $$")
        return tpl

    def placeholders(self, name: str) -> set[str]:
        """The ``$names`` template ``name`` needs."""
        return set(self._parse(name).get_identifiers())

    def render(self, name: str, **values: Any) -> str:
        """Fill template ``name``; a missing placeholder -> InputError naming the template file and the name."""
        tpl = self._parse(name)
        try:
            return tpl.substitute({k: "" if v is None else str(v) for k, v in values.items()})
        except KeyError as exc:
            raise InputError(str(self.path(name)), f"template needs a value for ${exc.args[0]}") from None

    def system(self, name: str) -> str | None:
        """The optional system message of template ``name``."""
        path = self.path(name)
        sys_path = path.with_name(f"{name}.system.txt")
        return sys_path.read_text(encoding="utf-8").strip() if sys_path.is_file() else None

    def messages(self, name: str, **values: Any) -> list[dict[str, str]]:
        """Chat messages for template ``name``: [system?] + user."""
        out = []
        system = self.system(name)
        if system:
            out.append({"role": "system", "content": system})
        out.append({"role": "user", "content": self.render(name, **values)})
        return out


_DEFAULT = PromptLibrary()


def default_library() -> PromptLibrary:
    return _DEFAULT


def render(name: str, library: PromptLibrary | None = None, **values: Any) -> str:
    """Render a template by name from ``library`` (default: the built-in templates)."""
    return (library or _DEFAULT).render(name, **values)


# ----------------------------------------------------------------------------------------------- helpers


def format_choices(choices: Sequence[str]) -> str:
    """``A. first`` / ``B. second`` ... one per line."""
    return "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))


def shown_question(item: Item) -> str:
    """An item as the rewrite and grading prompts show it: its question, then its options for multiple choice."""
    question = item.question.strip()
    if item.choices:
        question += "\n\nOptions:\n" + format_choices(item.choices)
    return question


def answer_messages(item: Item, library: PromptLibrary | None = None) -> list[dict[str, str]]:
    """The messages that ask a panel model to answer ``item``, by its format."""
    lib = library or _DEFAULT
    fmt = item.resolved_format
    name = ANSWER_TEMPLATE[fmt]
    values: dict[str, Any] = {"question": item.question.strip()}
    if fmt == "mcq":
        choices = item.choices or []
        values["choices"] = format_choices(choices)
        values["letters"] = ", ".join(LETTERS[: len(choices)]) if choices else "a letter"
    return lib.messages(name, **values)


def format_references(references: Iterable[tuple[str, float]], limit: int = MAX_REFERENCES) -> str:
    """Up to ``limit`` (item text, difficulty on 0-10) pairs, numbered, nearest-first as given."""
    lines = []
    for k, (text, difficulty) in enumerate(list(references)[:limit], start=1):
        lines.append(f"[{k}] (difficulty {difficulty:.1f} / 10)\n{text.strip()}")
    return "\n\n".join(lines) if lines else "(none)"


def rewrite_messages(
    parent: Item, *, target: float | None, parent_difficulty: float | None = None,
    references: Iterable[tuple[str, float]] = (), n_children: int = 4, library: PromptLibrary | None = None,
) -> list[dict[str, str]]:
    """The rewriter request. ``target`` and ``parent_difficulty`` are on the 0-10 scale (10 x normalised d);
    ``target=None`` gives the budget-matched baseline prompt (``rewrite_blind``: no difficulty feedback)."""
    lib = library or _DEFAULT
    common: dict[str, Any] = {"parent_question": shown_question(parent), "parent_answer": parent.answer,
                              "n_children": n_children}
    if target is None:
        return lib.messages("rewrite_blind", **common)
    return lib.messages(
        "rewrite", target=f"{target:.1f}",
        parent_difficulty=f"{parent_difficulty:.1f}" if parent_difficulty is not None else "unknown",
        references=format_references(references), **common,
    )


def validity_messages(question: str, reference_answer: str, library: PromptLibrary | None = None) -> list[dict[str, str]]:
    """The validity judge's request for one candidate item."""
    return (library or _DEFAULT).messages("validity_judge", question=question.strip(), reference_answer=reference_answer)


def grade_judge_messages(item: Item, response: str, rubric: str | None = None,
                         library: PromptLibrary | None = None) -> list[dict[str, str]]:
    """The grading judge's request for one (item, response); ``rubric`` defaults to ``item.metadata['rubric']``."""
    return (library or _DEFAULT).messages(
        "grade_judge", question=shown_question(item), reference_answer=item.answer, response=response,
        rubric=rubric or item.metadata.get("rubric") or DEFAULT_RUBRIC,
    )
