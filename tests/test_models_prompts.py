"""Prompt templates: every built-in renders, overrides by name and by folder, clear errors, package data."""

from __future__ import annotations

import pytest

from benchfill.data import Item
from benchfill.errors import InputError
from benchfill.models.config import config_from_dict
from benchfill.models.prompts import (
    BUILTIN_DIR,
    PromptLibrary,
    answer_messages,
    grade_judge_messages,
    render,
    rewrite_messages,
    validity_messages,
)

BUILTINS = ["answer_mcq", "answer_math", "answer_numeric", "answer_short", "answer_open", "rewrite", "rewrite_blind",
            "validity_judge", "grade_judge"]


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_templates_render(name):
    lib = PromptLibrary()
    values = {v: f"<{v}>" for v in lib.placeholders(name)}
    text = render(name, **values)
    assert "$" not in text.replace("$$", "") or name.startswith("answer")
    for v in values.values():
        assert v in text


def test_templates_ship_as_package_data():
    assert {p.stem for p in BUILTIN_DIR.glob("*.txt")} >= set(BUILTINS)


def test_answer_messages_by_format():
    mcq = Item(id="1", question="Pick.", answer="B", choices=["x", "y", "z"])
    text = answer_messages(mcq)[-1]["content"]
    assert "A. x\nB. y\nC. z" in text and "(A, B, C)" in text and "Answer: X" in text
    maths = answer_messages(Item(id="2", question="Solve $x^2=4$.", answer="2", format="math"))[-1]["content"]
    assert "\\boxed{}" in maths and "Solve $x^2=4$." in maths


def test_rewrite_prompt_has_target_parent_and_at_most_16_references():
    parent = Item(id="p", question="What is 2+3?", answer="5")
    refs = [(f"ref item {k}", k / 2) for k in range(20)]
    text = rewrite_messages(parent, target=6.25, parent_difficulty=3.0, references=refs)[-1]["content"]
    assert "Target difficulty: 6.2 / 10" in text or "Target difficulty: 6.3 / 10" in text
    assert "<parent>\nWhat is 2+3?\n</parent>" in text and "Reference answer of the parent: 5" in text
    assert "[16]" in text and "[17]" not in text and "exactly 4 entries" in text
    blind = rewrite_messages(parent, target=None)[-1]["content"]
    assert "Target difficulty" not in blind and "difficulty" not in blind.lower()


def test_judge_prompts():
    assert "<reference_answer>\n5\n</reference_answer>" in validity_messages("What is 2+3?", "5")[-1]["content"]
    item = Item(id="o", question="Why?", answer="Because.", format="open", metadata={"rubric": "Be strict."})
    text = grade_judge_messages(item, "Since.")[-1]["content"]
    assert "Be strict." in text and "<response>\nSince.\n</response>" in text


def test_overrides_by_name_and_folder(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "answer_math.txt").write_text("MATH: $question")
    (folder / "answer_math.system.txt").write_text("You are terse.")
    single = tmp_path / "judge.txt"
    single.write_text("JUDGE $question $reference_answer")
    cfg = config_from_dict({"prompts": {"dir": str(folder), "validity_judge": str(single)}},
                           source=str(tmp_path / "run.toml"))
    lib = PromptLibrary.from_config(cfg)
    msgs = answer_messages(Item(id="1", question="1+1?", answer="2", format="math"), lib)
    assert msgs == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "MATH: 1+1?"}]
    assert validity_messages("Q", "A", lib)[-1]["content"] == "JUDGE Q A"
    assert "Answer the following" in answer_messages(Item(id="2", question="Who?", answer="Ann", format="short"),
                                                     lib)[-1]["content"]  # not overridden -> built-in


def test_override_errors(tmp_path):
    cfg = config_from_dict({"prompts": {"rewrite": "missing.txt"}}, source=str(tmp_path / "run.toml"))
    with pytest.raises(InputError, match="prompts.rewrite: template file"):
        PromptLibrary.from_config(cfg)
    bad = tmp_path / "bad.txt"
    bad.write_text("costs $ 5")
    cfg = config_from_dict({"prompts": {"rewrite": str(bad)}}, source=str(tmp_path / "run.toml"))
    with pytest.raises(InputError, match="invalid template"):
        PromptLibrary.from_config(cfg)
    with pytest.raises(InputError, match=r"needs a value for \$question"):
        render("answer_math")
    with pytest.raises(InputError, match="unknown prompt template"):
        render("no_such_template")
