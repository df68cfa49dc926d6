"""The domain card: metadata / keyword / LLM-label ontologies with exact counts, YAML round trip, validation."""

from __future__ import annotations

import pytest

from benchfill.data import Item, load_items
from benchfill.designers.card import (
    ItemLabel,
    build_card,
    canonical_name,
    extract_card,
    keyword_clusters,
    load_card,
    save_card,
)
from benchfill.designers.text import detect_language, terms
from benchfill.errors import InputError


@pytest.fixture(scope="module")
def math500(examples):
    return load_items(examples / "math500.items.jsonl")


def test_math500_card_from_metadata(math500, tmp_path):
    card = extract_card(math500, name="math500", source="examples/math500.items.jsonl")
    assert card.n_items == 500 and card.language == "en" and card.modality == "text"
    assert card.method["categories"] == "metadata:subject"
    names = {c.name: c.count for c in card.ontology}
    assert names == {"Algebra": 124, "Intermediate Algebra": 97, "Prealgebra": 82, "Number Theory": 62,
                     "Precalculus": 56, "Geometry": 41, "Counting & Probability": 38}
    assert card.difficulty_levels == {"L1": 43, "L2": 90, "L3": 105, "L4": 128, "L5": 134}
    assert sum(card.formats.values()) == 500
    for node in card.ontology:
        assert sum(s.count for s in node.subdomains) == node.count
        assert node.share == pytest.approx(node.count / 500)
    assert 10 <= len(card.glossary) <= 30 and card.glossary[0].count >= card.glossary[-1].count
    assert {e.category for e in card.examples} == set(names)  # examples cover every category
    path = save_card(card, tmp_path / "card.yaml")
    assert load_card(path) == card


def test_keyword_fallback_without_metadata():
    topics = {"triangle": "What is the area of a triangle with base {n} and height 4?",
              "probability": "A die is rolled {n} times; what is the probability of no six?",
              "remainder": "What is the remainder when {n} is divided by 7?"}
    items = [Item(id=f"{t}{n}", question=q.format(n=n + 2), answer=str(n)) for t, q in topics.items()
             for n in range(8)]
    card = extract_card(items, name="toy", source="toy.jsonl", max_categories=5)
    assert card.method["categories"] == "keywords"
    # each cluster is named by the term that covers most uncovered items (ties: alphabetical)
    assert {c.name: c.count for c in card.ontology} == {"area": 8, "die": 8, "divided": 8}
    assert "triangle" in card.category("area").keywords
    assert card.difficulty_levels == {}


def test_keyword_clusters_are_greedy_and_deterministic():
    docs = [{"a", "b"}, {"a"}, {"a", "c"}, {"c"}, {"c", "d"}, {"e"}]
    clusters, rest = keyword_clusters(docs, range(6), k_max=5, min_size=2, max_df_share=1.0)
    assert clusters == [("a", [0, 1, 2]), ("c", [3, 4])] and rest == [5]


def test_llm_labels_are_merged_by_name_and_counted_exactly():
    items = [Item(id=str(k), question=f"Question number {k} about numbers and shapes.", answer="1") for k in range(12)]
    spellings = ["Algebra", "algebra ", "Algebras", "ALGEBRA", "Geometry", "geometry", "Geometry", "Geometry.",
                 "Number theory", "number  theory", "Number Theory", "number-theory"]
    labels = {str(k): ItemLabel(s, "linear equations" if k % 2 else "Linear Equation", ("slope", "Slope"))
              for k, s in enumerate(spellings)}
    card = extract_card(items, name="toy", source="toy.jsonl", labels=labels, label_model="m")
    counts = {c.name: c.count for c in card.ontology}
    assert counts == {"Algebra": 4, "Geometry": 4, "Number Theory": 4}
    for node in card.ontology:
        assert len(node.subdomains) == 1 and node.subdomains[0].count == 4  # both spellings merged
    assert card.method["categories"].startswith("llm:m")
    assert card.glossary[0].term == "slope" and card.glossary[0].count == 12
    assert canonical_name("Number-Theory ") == canonical_name("number theory")


def test_llm_assisted_card_with_the_simulated_labeller(examples, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(line + "\n" for line in (examples / "math500.items.jsonl").read_text().splitlines()[:40]))
    card = build_card(items, tmp_path / "c.yaml", config_path=examples / "designers_sim.toml")
    assert card.simulated and card.method["categories"].startswith("llm:sim/card")
    assert sum(c.count for c in card.ontology) == 40
    assert "SIMULATED" in (tmp_path / "c.yaml").read_text().splitlines()[0]
    assert (tmp_path / "c.yaml.calls.sqlite").is_file()


def test_card_validation_errors(tmp_path):
    bad = tmp_path / "card.yaml"
    bad.write_text("name: x\nsource: s\nn_items: 3\nmodality: text\nlanguage: en\nformats: {numeric: 3}\n"
                   "ontology:\n- {name: A, count: 2, share: 0.67}\n")
    with pytest.raises(InputError, match="ontology counts sum to 2"):
        load_card(bad)
    bad.write_text("name: x\nsource: s\nn_items: 2\nmodality: audio\nlanguage: en\nformats: {numeric: 2}\n"
                   "ontology:\n- {name: A, count: 2, share: 1}\n")
    with pytest.raises(InputError, match="modality"):
        load_card(bad)
    with pytest.raises(InputError, match="not found"):
        load_card(tmp_path / "nope.yaml")


def test_language_and_terms():
    assert detect_language(["求函数的最小值，并说明理由。"]) == "zh"
    assert detect_language(["What is the smallest prime?"]) == "en"
    assert terms(r"Compute $\frac{1}{2}$ of the triangles' areas [asy]draw((0,0)--(1,1));[/asy]") == \
        ["triangle", "area"]
