"""`benchfill import` at leaderboard scale ("Leaderboard scale"): a generated folder of lm-eval / Open LLM Leaderboard
logs (tests/leaderboard_logs.py, the fixtures' file structure) imports to exactly the counts in it, read one file
and one line at a time, in memory that grows with the response matrix, not with the logs; a progress bar on a
terminal only."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from leaderboard_logs import write_leaderboard
from rich.console import Console
from typer.testing import CliRunner

from benchfill import cli
from benchfill.data import ResponseMatrix, load_items, read_responses
from benchfill.errors import InputError
from benchfill.importers import Options, import_logs, write_responses
from benchfill.progress import on_step

runner = CliRunner()


def direct_counts(root: Path, flt: str | None = None) -> dict[tuple[str, str], tuple[int, int]]:
    """The cells read straight from the files with json, each file whole (the importer's rule: the filter ``flt``
    where a file has it, else none, else the file's first; the first metric listed; the model is the results
    file's model_name, else the folder)."""
    cells: dict[tuple[str, str], list[int]] = {}
    for f in sorted(root.rglob("samples_*.jsonl")):
        results = list(f.parent.glob("results_*.json"))
        model = (json.loads(results[0].read_text())["model_name"] if results
                 else f.parent.name.replace("__", "/", 1))
        task = f.name.removeprefix("samples_").rsplit("_", 1)[0]
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        have = list(dict.fromkeys(r["filter"] for r in rows))
        keep = flt if flt in have else "none" if "none" in have else have[0]
        for r in rows:
            if r["filter"] == keep:
                cell = cells.setdefault((model, f"{task}/{r['doc_id']}"), [0, 0])
                cell[0] += int(r[r["metrics"][0]])
                cell[1] += 1
    return {k: (c, n) for k, (c, n) in cells.items()}


def matrix_cells(m: ResponseMatrix) -> dict[tuple[str, str], tuple[int, int]]:
    j, i = np.nonzero(m.n_trials)
    return {(m.models[a], m.item_ids[b]): (int(m.n_correct[a, b]), int(m.n_trials[a, b])) for a, b in zip(j, i)}


@pytest.mark.parametrize("layout", ["lm-eval", "openllm"])
def test_a_generated_leaderboard_imports_to_the_counts_in_its_files(tmp_path, layout):
    w = write_leaderboard(tmp_path / "logs", models=20, items=300, tasks=10, layout=layout)
    assert w.files == 200
    steps: list[tuple[int, int]] = []
    with on_step(lambda done, total, name: steps.append((done, total))):
        res = import_logs(layout, [tmp_path / "logs"])
    m = res.matrix("x")
    direct = direct_counts(tmp_path / "logs")
    assert len(direct) == 20 * 300 and matrix_cells(m) == direct
    # ... and they are the truth drawn (the strict filter, which differs on every third document, was not read)
    rows, cols = [w.models.index(x) for x in m.models], [w.item_ids.index(i) for i in m.item_ids]
    assert (m.n_correct == w.correct[np.ix_(rows, cols)]).all() and (m.n_trials == 1).all()
    assert steps[0] == (0, 200) and steps[-1] == (200, 200) and len(steps) == 201
    if layout == "openllm":  # 20 folders without a results file: three notes and how many more, not 20 lines
        assert len(res.notes) == 4 and res.notes[-1].startswith("17 more folder(s) without results_*.json")


@pytest.mark.parametrize("flt", [None, "strict", "strict-2", "none", "absent"])
def test_the_filter_kept_is_the_one_reading_whole_files_keeps(tmp_path, flt):
    """Lines are graded as they come and only the filter that can still be kept is; whatever the order of the
    filters in a file (none last as lm-eval writes them, or first), the counts are those of the filter chosen."""
    w = write_leaderboard(tmp_path / "logs", models=3, items=30, tasks=3, kinds=("gen",), gen_filters=3)
    for f in sorted(w.root.rglob("samples_gen01_*.jsonl")):  # one task with its lines in the opposite order
        f.write_text("\n".join(reversed(f.read_text().splitlines())) + "\n")
    if flt == "absent":
        with pytest.raises(InputError, match="--filter absent: no task has this filter"):
            import_logs("lm-eval", [w.root], Options(filter=flt))
        return
    m = import_logs("lm-eval", [w.root], Options(filter=flt)).matrix("x")
    assert matrix_cells(m) == direct_counts(w.root, flt)
    if flt in (None, "none"):
        assert matrix_cells(m) == direct_counts(w.root)
    else:
        assert matrix_cells(m) != direct_counts(w.root)  # another filter: other answers on every third document


def test_cli_import_of_a_generated_leaderboard_writes_what_pandas_wrote(tmp_path):
    """The response file is written one model at a time; it is byte for byte what the former writer
    (``matrix.to_long()`` + a task column, pandas ``to_csv``) wrote, and loads back to the same matrix."""
    write_leaderboard(tmp_path / "logs", models=6, items=40, tasks=4)
    out, items = tmp_path / "r.csv", tmp_path / "items.jsonl"
    res = runner.invoke(cli.app, ["import", "lm-eval", str(tmp_path / "logs"), "--out", str(out), "--items-out",
                                  str(items)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "6 model(s), 40 item(s) in 4 task(s), 240 trial(s)" in res.output and "wrote" in res.output
    assert "reading logs" not in res.output  # no terminal: no progress bar
    logs = import_logs("lm-eval", [tmp_path / "logs"])
    frame = logs.matrix("x").to_long()
    frame["task"] = frame["item_id"].map(logs.tasks)
    assert out.read_text() == frame.to_csv(index=False)
    back = read_responses(out, load_items(items))
    assert matrix_cells(back) == matrix_cells(logs.matrix("x"))


def test_write_responses_quotes_as_pandas_does(tmp_path):
    m = ResponseMatrix(['org/"a"', "b,c"], ["t/1", "t,2/x", 't/"3"'], np.array([[1, 0, 2], [0, 1, 0]]),
                       np.array([[1, 0, 2], [3, 1, 1]]))
    tasks = {"t/1": "t", "t,2/x": "t,2", 't/"3"': "t"}
    frame = m.to_long()
    frame["task"] = frame["item_id"].map(tasks)
    assert write_responses(tmp_path / "r.csv", m, tasks) == 5
    assert (tmp_path / "r.csv").read_text() == frame.to_csv(index=False)


def _peak(root: Path, **opts) -> int:
    tracemalloc.start()
    try:
        res = import_logs("lm-eval", [root], Options(**opts))
        res.matrix("x")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_import_memory_follows_the_matrix_not_the_rows(tmp_path):
    """Peak traced memory of the import: four times the lines per file (8 filters instead of 2, the same matrix)
    or four times the files (repeated runs of the same tasks) cost next to nothing more, while the file read at once
    would cost at least its size; doubling the items does double it (the per-item part: the matrix, the ids)."""
    def logs(name: str, items: int, filters: int, runs: int = 1) -> Path:
        root = tmp_path / name
        for k in range(runs):  # a repeated run: the same models and tasks again, another date
            write_leaderboard(root / f"run{k}", models=4, items=items, tasks=1, kinds=("gen",), gen_filters=filters,
                              seed=k)
        return root

    base = logs("base", 1000, 2)
    size = max(f.stat().st_size for f in base.rglob("samples_*.jsonl"))
    p_base = _peak(base, texts=False)
    p_rows = _peak(logs("rows", 1000, 8), texts=False)
    p_runs = _peak(logs("runs", 1000, 2, runs=4), texts=False)
    assert p_base < size / 2, (p_base, size)  # one file (1.1 MB, 2,000 lines) is never held whole
    assert p_rows < 1.25 * p_base, (p_rows, p_base)  # 4x the lines per file
    assert p_runs < 1.25 * p_base, (p_runs, p_base)  # 4x the files and lines, the same cells
    p_texts = _peak(base)  # item texts: one record per item
    assert p_texts < p_base + 1000 * 600, (p_texts, p_base)
    p_items = _peak(logs("items", 2000, 2), texts=False)  # the measure sees what does grow: the items
    assert p_items > 1.5 * p_base, (p_items, p_base)


def test_bad_line_of_a_big_folder_names_file_and_row(tmp_path):
    write_leaderboard(tmp_path / "logs", models=3, items=20, tasks=2)
    f = sorted((tmp_path / "logs").rglob("samples_gen01_*.jsonl"))[1]
    lines = f.read_text().splitlines()
    rec = json.loads(lines[12])  # filter none (10 strict lines first), doc 2
    rec["exact_match"] = 0.5
    lines[12] = json.dumps(rec)
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"{f.name}: row 13: exact_match=0.5 is not 0/1"):
        import_logs("lm-eval", [tmp_path / "logs"])
    rec["exact_match"] = 1.0
    rec["doc"]["question"] = "a line\u2028separator inside a string"  # ensure_ascii=False writers leave it raw
    lines[12] = json.dumps(rec, ensure_ascii=False)
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert import_logs("lm-eval", [tmp_path / "logs"]).matrix("x").shape == (3, 20)
    f.write_bytes(f.read_bytes().replace(b"a line", b"a \xff line"))
    with pytest.raises(InputError, match=rf"{f.name}: row 13: not UTF-8 text"):
        import_logs("lm-eval", [tmp_path / "logs"])


def test_progress_bar_on_a_terminal_only(tmp_path, monkeypatch):
    write_leaderboard(tmp_path / "logs", models=3, items=20, tasks=2)
    term = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=term, force_terminal=True, width=100))
    res = runner.invoke(cli.app, ["import", "lm-eval", str(tmp_path / "logs"), "--out", str(tmp_path / "r.csv")],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "reading logs" in term.getvalue() and "6/6" in term.getvalue()
    plain = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=plain, force_terminal=False))
    res = runner.invoke(cli.app, ["import", "lm-eval", str(tmp_path / "logs"), "--out", str(tmp_path / "r.csv")],
                        catch_exceptions=False)
    assert res.exit_code == 0 and plain.getvalue() == ""
