"""The domain card (Stage 1 of BenchBench): what a seed benchmark covers, as a validated YAML file.

A card holds a two-level ontology (super-categories with sub-domains, each with item counts and keywords), the
format and difficulty-level (L1-L5) distributions, a glossary of domain terms, a few example items, the modality
and the language. Designers write their suites from it; the quota plan takes its distributions by default.

How the ontology is built, deterministically:

- super-categories: an item metadata field that labels (almost) every item (``subject``, ``category``, ``topic``,
  ...: MATH's ``subject``), else greedy keyword clustering (:func:`keyword_clusters`);
- sub-domains: greedy keyword clustering inside each super-category;
- LLM-assisted (optional, a ``[card]`` model in the config): the model labels every item with a category,
  sub-domain and terms (:func:`label_items`); the labels are then merged by normalised name and counted here, so
  the counts are exact whatever the model writes.

Difficulty levels come from a ``level`` / ``difficulty`` metadata field (MATH's 1-5, or easy / medium / hard).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchfill.aio import run_sync
from benchfill.data import Item
from benchfill.designers.requests import CardRequest
from benchfill.designers.text import detect_language, term_sets, terms
from benchfill.errors import InputError, from_validation_error

if TYPE_CHECKING:  # pragma: no cover
    from benchfill.models.client import ModelClient
    from benchfill.models.config import ModelConfig
    from benchfill.models.prompts import PromptLibrary

CARD_VERSION = 1
CATEGORY_FIELDS = ("subject", "category", "topic", "domain", "subfield", "field", "type")
LEVEL_FIELDS = ("level", "difficulty", "difficulty_level")
_LEVEL_WORDS = {"easy": "L1", "medium": "L3", "moderate": "L3", "hard": "L5", "very easy": "L1", "very hard": "L5"}


# ----------------------------------------------------------------------------------------------- schema


class SubDomain(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    count: int = Field(ge=0)
    keywords: list[str] = Field(default_factory=list)


class Category(BaseModel):
    """A super-category of the ontology with its sub-domains (their counts sum to the category's)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    count: int = Field(ge=0)
    share: float = Field(ge=0, le=1)
    keywords: list[str] = Field(default_factory=list)
    subdomains: list[SubDomain] = Field(default_factory=list)

    @model_validator(mode="after")
    def _sub_counts(self) -> "Category":
        if self.subdomains and sum(s.count for s in self.subdomains) != self.count:
            raise ValueError(f"category {self.name!r}: sub-domain counts do not sum to {self.count}")
        names = [s.name for s in self.subdomains]
        if len(set(names)) != len(names):
            raise ValueError(f"category {self.name!r}: duplicate sub-domain names")
        return self


class GlossaryTerm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    term: str
    count: int = Field(ge=0, description="seed items that use the term")
    definition: str | None = None
    example: str | None = Field(default=None, description="id of an item that uses it")


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    answer: str
    choices: list[str] | None = None
    format: str
    category: str
    subdomain: str | None = None
    level: str | None = None


class DomainCard(BaseModel):
    """The domain card of a seed benchmark (saved as YAML)."""

    model_config = ConfigDict(extra="forbid")

    version: int = CARD_VERSION
    name: str
    source: str = Field(description="the seed items file the card was extracted from")
    n_items: int = Field(ge=1)
    modality: Literal["text", "multimodal"]
    language: str = Field(min_length=2, description="ISO 639-1 code, 'und' when unknown")
    method: dict[str, str] = Field(default_factory=dict, description="how each part was built")
    formats: dict[str, int]
    difficulty_levels: dict[str, int] = Field(default_factory=dict, description="L1-L5 counts; empty if unknown")
    ontology: list[Category] = Field(min_length=1)
    glossary: list[GlossaryTerm] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    simulated: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> "DomainCard":
        if sum(c.count for c in self.ontology) != self.n_items:
            raise ValueError(f"ontology counts sum to {sum(c.count for c in self.ontology)}, not n_items={self.n_items}")
        names = [c.name for c in self.ontology]
        if len(set(names)) != len(names):
            raise ValueError("duplicate category names in the ontology")
        if sum(self.formats.values()) != self.n_items:
            raise ValueError("format counts do not sum to n_items")
        from benchfill.designers.quotas import FORMATS

        bad = [k for k in self.formats if k not in FORMATS]
        if bad:
            raise ValueError(f"unknown format {bad[0]!r} (known: {', '.join(FORMATS)})")
        bad = [k for k in self.difficulty_levels if k not in ("L1", "L2", "L3", "L4", "L5")]
        if bad:
            raise ValueError(f"unknown difficulty level {bad[0]!r} (L1-L5)")
        if self.difficulty_levels and sum(self.difficulty_levels.values()) > self.n_items:
            raise ValueError("difficulty level counts exceed n_items")
        return self

    def category(self, name: str) -> Category | None:
        return next((c for c in self.ontology if c.name == name), None)


def save_card(card: DomainCard, path: str | Path) -> Path:
    """Write the card as YAML, atomically."""
    import yaml

    from benchfill.io import atomic_write_text

    header = "# benchfill domain card (BenchBench stage 1)" + (" -- SIMULATED labels" if card.simulated else "") + "\n"
    body = yaml.safe_dump(card.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=120)
    return atomic_write_text(path, header + body)


def load_card(path: str | Path) -> DomainCard:
    """Read and validate a card; every problem -> one InputError naming the file and field."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), "card file not found") from None
    except yaml.YAMLError as exc:
        raise InputError(str(path), f"invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "a domain card is a YAML mapping")
    try:
        return DomainCard.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(str(path), exc, top="<card>") from None


# ----------------------------------------------------------------------------------------------- text helpers


def detect_modality(items: Sequence[Item]) -> Literal["text", "multimodal"]:
    """'multimodal' when any item carries an image (metadata image fields, ``<image>`` or markdown images)."""
    keys = ("image", "images", "image_path", "image_url", "figure", "img")
    for it in items:
        if any(it.metadata.get(k) for k in keys) or "<image" in it.question or re.search(r"!\[[^\]]*\]\(", it.question):
            return "multimodal"
    return "text"


def keyword_clusters(docs: Sequence[set[str]], members: Sequence[int], k_max: int, min_size: int,
                     max_df_share: float = 0.6) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """Greedy keyword clustering: repeatedly take the term found in most not-yet-covered documents and make its
    documents a cluster, until ``k_max`` clusters or no term covers ``min_size`` documents.

    Terms found in more than ``max_df_share`` of ``members`` are too generic to name a cluster. Ties go to the
    alphabetically first term, so the result is deterministic. Returns ([(term, doc indices)], uncovered indices).
    """
    members = list(members)
    df_all = Counter(t for i in members for t in docs[i])
    limit = max_df_share * len(members)
    allowed = {t for t, c in df_all.items() if c <= limit}
    uncovered = list(members)
    clusters: list[tuple[str, list[int]]] = []
    while uncovered and len(clusters) < k_max:
        df = Counter(t for i in uncovered for t in docs[i] if t in allowed)
        if not df:
            break
        term, count = min(df.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < min_size:
            break
        picked = [i for i in uncovered if term in docs[i]]
        clusters.append((term, picked))
        allowed.discard(term)
        uncovered = [i for i in uncovered if term not in docs[i]]
    return clusters, uncovered


def top_keywords(docs: Sequence[set[str]], members: Sequence[int], background: Counter, n_total: int,
                 k: int = 5) -> list[str]:
    """The ``k`` terms most over-represented in ``members`` (lift x support; found in >= 2 of them)."""
    df = Counter(t for i in members for t in docs[i])
    m = max(len(members), 1)
    scored = [((c / m) * math.log((n_total + 1) / (background[t] + 1) + 1.0), t) for t, c in df.items() if c >= 2]
    return [t for _, t in sorted(scored, key=lambda st: (-st[0], st[1]))[:k]]


def canonical_name(name: str) -> str:
    """The key labels are merged on: case, punctuation, spacing and a trailing plural 's' ignored."""
    words = re.sub(r"[^\w\s]", " ", name.lower()).split()
    words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]
    return " ".join(words)


def _level_of(item: Item) -> str | None:
    for key in LEVEL_FIELDS:
        value = item.metadata.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            n = int(value)
            return f"L{n}" if 1 <= n <= 5 else None
        text = str(value).strip().lower()
        m = re.fullmatch(r"(?:level\s*|l)?([1-5])", text)
        if m:
            return f"L{m.group(1)}"
        if text in _LEVEL_WORDS:
            return _LEVEL_WORDS[text]
    return None


def _category_field(items: Sequence[Item], coverage: float = 0.9) -> str | None:
    """The metadata field that labels at least ``coverage`` of the items with a short string, if any."""
    for key in CATEGORY_FIELDS:
        values = [it.metadata.get(key) for it in items]
        ok = [v for v in values if isinstance(v, str) and v.strip() and len(v) <= 80]
        distinct = len(set(ok))
        if len(ok) >= coverage * len(items) and 1 <= distinct <= max(2, len(items) // 3):
            return key
    return None


# ----------------------------------------------------------------------------------------------- LLM labels


@dataclass(frozen=True)
class ItemLabel:
    """A card model's label of one seed item."""

    category: str
    subdomain: str | None = None
    terms: tuple[str, ...] = ()


def _label_validator(obj: Any) -> list[dict[str, Any]]:
    rows = obj.get("labels") if isinstance(obj, dict) else obj
    if not isinstance(rows, list):
        raise ValueError('expected {"labels": [...]}')
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("id") is not None and str(row.get("category") or "").strip():
            out.append(row)
    if not out:
        raise ValueError('no usable label (each needs "id" and "category")')
    return out


async def label_items(items: Sequence[Item], client: "ModelClient", cfg: "ModelConfig",
                      prompts: "PromptLibrary | None" = None, batch: int = 20,
                      hints: Mapping[str, str] | None = None) -> dict[str, ItemLabel]:
    """Ask the card model to label every item (batches of ``batch``; cached calls). Items the model skips or
    labels badly keep no label (the caller falls back to keywords for them)."""
    import asyncio

    chunks = [items[i: i + batch] for i in range(0, len(items), batch)]

    async def one(chunk: Sequence[Item]) -> dict[str, ItemLabel]:
        request = CardRequest.build(chunk, hints)
        res = await client.complete_json(cfg, request.messages(prompts), _label_validator, role="card",
                                         request=request)
        if not res.ok or res.parsed is None:
            return {}
        wanted = {it.id for it in chunk}
        out = {}
        for row in res.parsed:
            rid = str(row["id"])
            if rid in wanted and rid not in out:
                raw_terms = row.get("terms") or []
                t = tuple(str(x).strip().lower() for x in raw_terms if str(x).strip())[:8] if isinstance(raw_terms, list) else ()
                sub = str(row.get("subdomain") or "").strip() or None
                out[rid] = ItemLabel(str(row["category"]).strip()[:80], sub[:80] if sub else None, t)
        return out

    merged: dict[str, ItemLabel] = {}
    for part in await asyncio.gather(*(one(c) for c in chunks)):
        merged.update(part)
    return merged


def _merge_names(raw: Mapping[int, str]) -> dict[int, str]:
    """Map each item's raw label to one display name per canonical key (the most frequent spelling wins)."""
    spellings: dict[str, Counter] = defaultdict(Counter)
    for name in raw.values():
        spellings[canonical_name(name)][" ".join(name.split())] += 1
    # ties: not ALL CAPS, then the shortest, then alphabetical ("Algebra" over "ALGEBRA" and "Algebras")
    display = {key: min(c.items(), key=lambda kv: (-kv[1], kv[0].isupper() and len(kv[0]) > 3, len(kv[0]), kv[0]))[0]
               for key, c in spellings.items()}
    return {i: display[canonical_name(name)] for i, name in raw.items()}


# ----------------------------------------------------------------------------------------------- extraction


def extract_card(
    items: Sequence[Item], *, name: str, source: str, labels: Mapping[str, ItemLabel] | None = None,
    label_model: str | None = None, language: str | None = None, max_categories: int = 8,
    max_subdomains: int = 6, n_examples: int = 12, glossary_size: int = 30, simulated: bool = False,
) -> DomainCard:
    """Build the domain card of ``items`` (see the module docstring). Deterministic for given inputs.

    Args:
        labels: LLM labels by item id (from :func:`label_items`); unlabelled items fall back to metadata/keywords.
        label_model: the labelling model's name, recorded in ``card.method``.
        max_categories / max_subdomains: cluster limits of the keyword fallback.
        n_examples: example items (spread over categories and levels).
    """
    if not items:
        raise InputError(source, "no items to build a card from")
    n = len(items)
    docs = term_sets(items)
    background = Counter(t for d in docs for t in d)
    method: dict[str, str] = {}
    labels = labels or {}
    min_size = max(2, n // 50)

    # --- super-categories
    field = _category_field(items)
    raw_cat: dict[int, str] = {}
    if field is not None:
        for i, it in enumerate(items):
            value = it.metadata.get(field)
            raw_cat[i] = value.strip() if isinstance(value, str) and value.strip() else "other"
        method["categories"] = f"metadata:{field}"
    if labels:
        for i, it in enumerate(items):
            if it.id in labels:
                raw_cat[i] = labels[it.id].category
        method["categories"] = f"llm:{label_model or 'card model'}" + (f" (fallback metadata:{field})" if field else "")
    missing = [i for i in range(n) if i not in raw_cat]
    if missing:
        clusters, rest = keyword_clusters(docs, missing, max_categories, min_size)
        for term, members in clusters:
            for i in members:
                raw_cat[i] = term
        for i in rest:
            raw_cat[i] = "other"
        method.setdefault("categories", "keywords")
        if len(missing) < n:
            method["categories"] += " + keywords for unlabelled items"
    cat_of = _merge_names(raw_cat)
    # categories too small to quota are folded into "other"
    counts = Counter(cat_of.values())
    small = {c for c, k in counts.items() if k < min_size and len(counts) > 1}
    if small:
        cat_of = {i: ("other" if c in small else c) for i, c in cat_of.items()}

    # --- sub-domains
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i in range(n):
        by_cat[cat_of[i]].append(i)
    sub_of: dict[int, str] = {}
    ontology: list[Category] = []
    for cat in sorted(by_cat, key=lambda c: (c == "other", -len(by_cat[c]), c)):
        members = by_cat[cat]
        raw_sub = {i: labels[items[i].id].subdomain for i in members
                   if items[i].id in labels and labels[items[i].id].subdomain}
        subs = _merge_names(raw_sub)  # type: ignore[arg-type]
        rest_members = [i for i in members if i not in subs]
        sub_min = max(2, len(members) // 40)
        clusters, rest = keyword_clusters(docs, rest_members, max_subdomains, sub_min)
        for term, ms in clusters:
            for i in ms:
                subs[i] = term
        for i in rest:
            subs[i] = "general"
        sub_counts = Counter(subs.values())
        tiny = {s for s, k in sub_counts.items() if k < sub_min and s != "general"}
        for i in members:
            if subs[i] in tiny:
                subs[i] = "general"
        sub_of.update(subs)
        sub_members: dict[str, list[int]] = defaultdict(list)
        for i in members:
            sub_members[subs[i]].append(i)
        subdomains = [
            SubDomain(name=s, count=len(ms), keywords=top_keywords(docs, ms, background, n, 5))
            for s, ms in sorted(sub_members.items(), key=lambda kv: (kv[0] == "general", -len(kv[1]), kv[0]))
        ]
        ontology.append(Category(name=cat, count=len(members), share=round(len(members) / n, 6),
                                 keywords=top_keywords(docs, members, background, n, 6), subdomains=subdomains))
    method["subdomains"] = ("llm labels + keywords" if labels else "keywords") + " (greedy keyword clustering)"

    # --- formats and levels
    from benchfill.designers.quotas import design_format

    formats = Counter(design_format(it) for it in items)
    levels = {i: _level_of(it) for i, it in enumerate(items)}
    level_counts = Counter(v for v in levels.values() if v)
    method["difficulty_levels"] = "metadata" if level_counts else "unknown (no level field)"

    # --- glossary: LLM terms first (merged by name), then the most widespread keywords and bigrams
    glossary: list[GlossaryTerm] = []
    seen: set[str] = set()
    if labels:
        llm_terms: dict[str, list[str]] = defaultdict(list)
        for it in items:
            for t in (labels[it.id].terms if it.id in labels else ()):
                llm_terms[canonical_name(t)].append(it.id)
        for key, ids in sorted(llm_terms.items(), key=lambda kv: (-len(set(kv[1])), kv[0])):
            if len(set(ids)) >= 2 and key and len(glossary) < glossary_size // 2:
                glossary.append(GlossaryTerm(term=key, count=len(set(ids)), example=ids[0]))
                seen.add(key)
    bigrams: Counter = Counter()
    first_use: dict[str, str] = {}
    for it in items:
        toks = terms(it.question)
        grams = set(toks) | {f"{a} {b}" for a, b in zip(toks, toks[1:]) if a != b}
        for g in grams:
            bigrams[g] += 1
            first_use.setdefault(g, it.id)
    min_df = 3 if n >= 30 else 2
    generic = max(3, int(0.5 * n))
    for term, count in sorted(bigrams.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(glossary) >= glossary_size:
            break
        if min_df <= count <= generic and term not in seen:
            glossary.append(GlossaryTerm(term=term, count=count, example=first_use[term]))
            seen.add(term)
    method["glossary"] = ("llm terms + " if labels else "") + "most widespread terms and bigrams"

    # --- examples: spread over categories (round robin), then over levels within a category
    examples: list[Example] = []
    per_cat = max(1, math.ceil(n_examples / max(len(ontology), 1)))
    picks_by_cat: list[list[int]] = []
    for node in ontology:
        members = sorted(by_cat[node.name], key=lambda i: (levels[i] or "L9", len(items[i].question), items[i].id))
        picks = sorted({members[round(k * (len(members) - 1) / max(per_cat - 1, 1))] for k in range(per_cat)},
                       key=lambda i: (levels[i] or "L9", i))
        picks_by_cat.append(picks)
    for rank in range(per_cat):
        for node, picks in zip(ontology, picks_by_cat):
            if rank < len(picks) and len(examples) < n_examples:
                it = items[picks[rank]]
                examples.append(Example(
                    id=it.id, question=it.question.strip()[:800], answer=it.answer.strip()[:200], choices=it.choices,
                    format=design_format(it), category=node.name, subdomain=sub_of.get(picks[rank]),
                    level=levels[picks[rank]],
                ))
    return DomainCard(
        name=name, source=source, n_items=n, modality=detect_modality(items),
        language=language or detect_language(it.question for it in items), method=method,
        formats=dict(sorted(formats.items(), key=lambda kv: (-kv[1], kv[0]))),
        difficulty_levels={k: level_counts[k] for k in ("L1", "L2", "L3", "L4", "L5") if level_counts[k]},
        ontology=ontology, glossary=glossary, examples=examples, simulated=simulated,
    )


# ----------------------------------------------------------------------------------------------- prompt text


def card_prompt_text(card: DomainCard, max_terms: int = 25, max_examples: int = 6) -> str:
    """The card as the designer prompt shows it: plain text, deterministic."""
    lines = [f"Benchmark: {card.name} ({card.n_items} items, language: {card.language}, modality: {card.modality})",
             "", "Ontology (super-category: share of the benchmark; sub-domains):"]
    for node in card.ontology:
        subs = ", ".join(f"{s.name} ({s.count})" for s in node.subdomains)
        kw = f" [keywords: {', '.join(node.keywords)}]" if node.keywords else ""
        lines.append(f"- {node.name}: {node.share:.0%} of items{kw}" + (f"; sub-domains: {subs}" if subs else ""))
    lines.append("")
    lines.append("Formats in the seed benchmark: " + ", ".join(f"{k} {v}" for k, v in card.formats.items()))
    if card.difficulty_levels:
        lines.append("Difficulty levels in the seed benchmark: "
                     + ", ".join(f"{k} {v}" for k, v in card.difficulty_levels.items()))
    if card.glossary:
        lines.append("Glossary of domain terms: " + ", ".join(g.term for g in card.glossary[:max_terms]))
    if card.examples:
        lines += ["", "Example items from the seed benchmark (do not copy them):"]
        for ex in card.examples[:max_examples]:
            tag = f"{ex.category}" + (f" / {ex.subdomain}" if ex.subdomain else "") + (f", {ex.level}" if ex.level else "")
            q = ex.question if len(ex.question) <= 500 else ex.question[:500] + " ..."
            lines.append(f"[{tag}, {ex.format}] {q}")
            if ex.choices:
                lines.append("   options: " + " | ".join(ex.choices))
            lines.append(f"   answer: {ex.answer}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- the command


def build_card(items_path: str | Path, out_path: str | Path, *, config_path: str | Path | None = None,
               name: str | None = None, language: str | None = None, max_categories: int = 8,
               n_examples: int = 12, cache_path: str | Path | None = None) -> DomainCard:
    """``benchfill designers card``: load the items, label them with the config's ``[card]`` model when there is
    one (calls cached next to the card), extract, validate and save the card."""

    from benchfill.data import load_items

    items = load_items(items_path)
    labels: dict[str, ItemLabel] | None = None
    label_model = None
    simulated = False
    if config_path is not None:
        from benchfill.designers.config import load_designers_config
        from benchfill.models.config import validate_model

        cfg = load_designers_config(config_path)
        if cfg.card is not None:
            validate_model(cfg.card, "card", cfg.source, cfg.sim)
            lib = cfg.prompt_library()
            label_model = cfg.card.label
            simulated = cfg.card.is_simulated
            field = _category_field(items)
            hints = {it.id: str(it.metadata[field]) for it in items if field and it.metadata.get(field)}

            async def run() -> dict[str, ItemLabel]:
                from benchfill.models.cache import CallCache
                from benchfill.models.client import ModelClient

                sim = None
                if simulated:
                    from benchfill.designers.sim import DesignerSimWorld

                    sim = DesignerSimWorld.from_designers_config(cfg)
                cache = Path(cache_path) if cache_path else Path(str(out_path) + ".calls.sqlite")
                client = ModelClient(CallCache(cache), sim=sim)
                try:
                    return await label_items(items, client, cfg.card, lib, hints=hints)  # type: ignore[arg-type]
                finally:
                    await client.aclose()

            labels = run_sync(run())
    stem = Path(items_path).name
    for suffix in (".gz", ".jsonl", ".json"):
        stem = stem.removesuffix(suffix)
    card = extract_card(items, name=name or stem.removesuffix(".items"), source=str(items_path), labels=labels,
                        label_model=label_model, language=language, max_categories=max_categories,
                        n_examples=n_examples, simulated=simulated)
    save_card(card, out_path)
    return card
