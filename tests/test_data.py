"""Loaders: every bad-input rule of SPEC section 1 gives one clear InputError naming file, row and rule."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from benchfill.data import Item, infer_format, load_items, read_item_groups, select_models
from benchfill.errors import InputError
from benchfill.importers import load_responses

GOOD = "model,item_id,n_correct,n_trials\na,q1,1,4\na,q2,0,4\nb,q1,4,4\nb,q2,2,4\n"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_long_csv_roundtrip(tmp_path):
    r = load_responses(write(tmp_path, "r.csv", GOOD))
    assert r.models == ["a", "b"] and r.item_ids == ["q1", "q2"]
    assert r.n_correct.tolist() == [[1, 0], [4, 2]] and r.n_trials.tolist() == [[4, 4], [4, 4]]
    np.testing.assert_allclose(r.accuracy_by_model(), [1 / 8, 6 / 8])


def test_gzip_and_jsonl_and_wide_and_pyirt(tmp_path):
    gz = tmp_path / "r.csv.gz"
    gz.write_bytes(gzip.compress(GOOD.encode()))
    assert load_responses(gz).n_correct.sum() == 7
    rows = [dict(model="a", item_id="q1", n_correct=1, n_trials=2), dict(model="b", item_id="q1", n_correct=2, n_trials=2)]
    jl = write(tmp_path, "r.jsonl", "\n".join(json.dumps(r) for r in rows))
    assert load_responses(jl).n_trials.tolist() == [[2], [2]]
    wide = load_responses(write(tmp_path, "w.csv", "model,q1,q2,q3\na,1,0,\nb,1,1,1\n"))
    assert wide.n_trials.tolist() == [[1, 1, 0], [1, 1, 1]] and wide.n_correct.tolist() == [[1, 0, 0], [1, 1, 1]]
    pyirt = write(tmp_path, "p.jsonl", json.dumps({"subject_id": "a", "responses": {"q1": 1, "q2": 0}}) + "\n"
                  + json.dumps({"subject_id": "b", "responses": {"q1": 0, "q2": 0}}) + "\n")
    assert load_responses(pyirt).n_correct.tolist() == [[1, 0], [0, 0]]


@pytest.mark.parametrize(
    "text, row, rule",
    [
        ("model,item_id,n_correct\na,q1,1\n", 1, "missing column(s) n_trials"),
        ("model,item_id,n_correct,n_trials\na,q1,5,4\nb,q1,1,4\n", 2, "n_correct=5 > n_trials=4"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,-1,4\n", 3, "n_correct=-1 is negative"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,NaN,4\n", 3, "is missing, NaN or not a number"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,,4\n", 3, "is missing, NaN or not a number"),
        ("model,item_id,n_correct,n_trials\na,q1,1.5,4\nb,q1,1,4\n", 2, "is not a whole number"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\na,q1,2,4\nb,q1,1,4\n", 3, "duplicate row for model=a, item_id=q1"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\na,q2,1,4\n", None, "only one model"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,1,4\na,q2,0,0\nb,q2,0,0\n", 4, "attempted by no model"),
    ],
)
def test_bad_input_rules(tmp_path, text, row, rule):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError) as info:
        load_responses(path)
    msg = str(info.value)
    assert rule in msg and str(path) in msg
    assert info.value.row == row
    assert "\n" not in msg


def test_unknown_item_ids_and_unattempted_items(tmp_path):
    items = [Item(id="q1", question="?", answer="1"), Item(id="q2", question="?", answer="2")]
    bad = write(tmp_path, "r.csv", "model,item_id,n_correct,n_trials\na,q1,1,1\nb,q9,1,1\n")
    with pytest.raises(InputError, match=r"row 3: unknown item_id=q9"):
        load_responses(bad, items=items)
    partial = write(tmp_path, "s.csv", "model,item_id,n_correct,n_trials\na,q1,1,1\nb,q1,1,1\n")
    with pytest.raises(InputError, match="item_id=q2 was attempted by no model"):
        load_responses(partial, items=items)


def test_missing_file_and_garbage(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_responses(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="empty file"):
        load_responses(write(tmp_path, "e.csv", ""))
    bad_gz = tmp_path / "x.csv.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"junk")
    with pytest.raises(InputError, match="corrupt gzip"):
        load_responses(bad_gz)


def test_items_loader_maps_math_style_and_validates(tmp_path, examples):
    items = load_items(examples / "math500.items.jsonl")
    assert len(items) == 500 and items[0].id == "0" and items[0].metadata["level"] == 2
    assert items[0].resolved_format == "math"
    bad = write(tmp_path, "i.jsonl", '{"id": "a", "question": "q", "answer": "1"}\n{"id": "a", "question": "q", "answer": "2"}\n')
    with pytest.raises(InputError, match="row 2: duplicate item id 'a'"):
        load_items(bad)
    with pytest.raises(InputError, match="row 1: missing or empty answer"):
        load_items(write(tmp_path, "j.jsonl", '{"id": "a", "question": "q"}\n'))
    with pytest.raises(InputError, match="row 1: invalid JSON"):
        load_items(write(tmp_path, "k.jsonl", "{nope\n"))


def test_infer_format():
    assert infer_format("B", ["x", "y"]) == "mcq"
    assert infer_format("1,000", None) == "numeric"
    assert infer_format("\\frac{1}{2}", None) == "math"
    assert infer_format("Paris", None) == "short"


def test_select_models_spreads_by_accuracy_rank():
    from benchfill.data import ResponseMatrix

    J = 20
    acc = np.linspace(0.05, 0.95, J)[::-1]  # model m00 strongest
    n = np.full((J, 10), 100)
    k = (acc[:, None] * n).astype(int)
    r = ResponseMatrix([f"m{j:02d}" for j in range(J)], [str(i) for i in range(10)], k, n)
    chosen = select_models(r, 5)
    assert chosen == ["m19", "m14", "m09", "m05", "m00"]  # ranks 0, 5, 10, 14, 19 of weakest-first order


def test_item_groups(tmp_path):
    table = write(tmp_path, "t.csv", "item_id,benchmark\nq1,A\nq2,B\nq3,A\n")
    assert read_item_groups(table, "benchmark", ["q1", "q2", "q3"]) == {"A": ["q1", "q3"], "B": ["q2"]}
    with pytest.raises(InputError, match="not in the table"):
        read_item_groups(table, "benchmark", ["q1", "q4"])


def test_the_load_path_does_not_import_pandas(examples):
    """Importing the reader every command uses and loading a CSV.GZ, a wide CSV, a JSONL file and an items table
    leave pandas unimported (it costs ~0.3 s of every command); only to_long and responses_from_frame import it."""
    import subprocess
    import sys

    code = (
        "import sys, tempfile, pathlib, benchfill.data as d\n"
        "from benchfill.importers import load_responses\n"
        "assert 'pandas' not in sys.modules\n"
        f"r = load_responses({str(examples / 'math500.responses.csv.gz')!r})\n"
        "t = pathlib.Path(tempfile.mkdtemp())\n"
        "(t / 'w.csv').write_text('model,q1,q2\\na,1,0\\nb,1,1\\n')\n"
        "(t / 'r.jsonl').write_text('{\"model\": \"a\", \"item_id\": \"q1\", \"n_correct\": 1, \"n_trials\": 2}\\n'\n"
        "                           '{\"model\": \"b\", \"item_id\": \"q1\", \"n_correct\": 0, \"n_trials\": 2}\\n')\n"
        "(t / 'i.csv').write_text('item_id,benchmark\\nq1,\"A, B\"\\nq2,C\\n')\n"
        "load_responses(t / 'w.csv'); load_responses(t / 'r.jsonl')\n"
        "assert d.read_item_groups(t / 'i.csv', 'benchmark', ['q1', 'q2']) == {'A, B': ['q1'], 'C': ['q2']}\n"
        "assert 'pandas' not in sys.modules, 'pandas imported on the load path'\n"
        "assert len(r.to_long()) > 0 and 'pandas' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


LONG_HEADER = "model,item_id,n_correct,n_trials\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (LONG_HEADER + "a,q1,1,4\nb,q1,1,4,9\n", "not a valid CSV (expected 4 fields in line 3, saw 5)"),
        # blank lines count as lines here (the line number is the file's)
        (LONG_HEADER + "a,q1,1,4\n\n\nb,q1,1,4,9\n", "not a valid CSV (expected 4 fields in line 5, saw 5)"),
        # the first data row too (pandas silently took its first field as an index)
        (LONG_HEADER + "a,q1,1,4,4\nb,q1,1,4,4\n", "not a valid CSV (expected 4 fields in line 2, saw 5)"),
        (LONG_HEADER + '"a","q1",1,4\nb,q1,1,4,"x"\n', "not a valid CSV (expected 4 fields in line 3, saw 5)"),
        ("model,q1,q2\na,1,0\nb,1,1,1\n", "not a valid CSV (expected 3 fields in line 3, saw 4)"),
        (LONG_HEADER + 'a,q1,1,4\nb,"q1,1,4\nc,q1,1,4\n',
         "not a valid CSV (a quoted field in the row at line 3 is never closed)"),
    ],
)
def test_a_row_with_too_many_fields_or_an_open_quote_is_not_a_valid_csv(tmp_path, text, message):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError) as info:
        load_responses(path)
    assert str(info.value) == f"{path}: {message}"


def test_quoted_fields_spaces_and_blank_lines(tmp_path):
    text = ('model,item_id,n_correct,n_trials,task\r\n"a, the model", "q,1",1,4, "T, x"\r\n\r\n   \r\n'
            'b ,  q2 , 2 ,4,T2\r\n"b","q""3",0,4,T3\r\n"a, the model",q2,0,1,T2\r\nb,"q,1",3,4,"T, x"\r\n')
    r = load_responses(write(tmp_path, "q.csv", text))
    assert r.models == ["a, the model", "b"] and r.item_ids == ["q,1", "q2", 'q"3']
    assert r.n_correct.tolist() == [[1, 0, 0], [3, 2, 0]] and r.n_trials.tolist() == [[4, 1, 0], [4, 4, 4]]
    assert r.meta["groups"]["task"] == {"q,1": "T, x", "q2": "T2", 'q"3': "T3"}
    # blank and whitespace-only lines are skipped and not counted: the duplicate names the data rows 2 and 5
    dup = write(tmp_path, "d.csv", LONG_HEADER + '"a",q1,1,4\n\n  \nb,q1,1,4\nc,q1,1,4\n"a", q1,1,4\n')
    with pytest.raises(InputError, match=r"row 5: duplicate row for model=a, item_id=q1 \(first at row 2\)"):
        load_responses(dup)


@pytest.mark.parametrize(
    "text, row, rule",
    [
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,1\n", 3, "n_trials='' is missing, NaN or not a number"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1\n", 3, "n_correct='' is missing, NaN or not a number"),
        ("model,item_id,n_correct,n_trials\na,q1,1,4\nb\n", 3, "item_id is empty"),
        ('model,item_id,n_correct,n_trials\na,"q,1",1,4\n"b"\n', 3, "item_id is empty"),
    ],
)
def test_a_row_with_fewer_fields_reads_the_missing_ones_as_empty(tmp_path, text, row, rule):
    path = write(tmp_path, "short.csv", text)
    with pytest.raises(InputError) as info:
        load_responses(path)
    assert str(info.value) == f"{path}: row {row}: {rule}"


def test_wide_short_rows_and_repeated_or_unnamed_columns(tmp_path):
    # a short row: the missing cells are blank (not attempted); a repeated column name reads as <name>.1 and an
    # unnamed one as "Unnamed: <i>", as pandas named them
    r = load_responses(write(tmp_path, "w.csv", "model,q1,q1,,q2\na,1,0\nb,1,1,true,0.0\n"))
    assert r.item_ids == ["q1", "q1.1", "Unnamed: 3", "q2"]
    assert r.n_trials.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]] and r.n_correct.tolist() == [[1, 0, 0, 0], [1, 1, 1, 0]]


def test_counts_read_like_numbers(tmp_path):
    rows = "a,q1, 1.0 ,4e0\nb,q1,+2,004\n"
    r = load_responses(write(tmp_path, "n.csv", "model,item_id,n_correct,n_trials\n" + rows))
    assert r.n_correct.tolist() == [[1], [2]] and r.n_trials.tolist() == [[4], [4]]
    for bad in ("1_0", "٣", "inf", "0x1"):
        with pytest.raises(InputError, match=f"row 3: n_correct='{bad}' is missing, NaN or not a number"):
            load_responses(write(tmp_path, "b.csv", f"model,item_id,n_correct,n_trials\na,q1,1,4\nb,q1,{bad},4\n"))


def test_a_frame_is_validated_like_a_file():
    import pandas as pd

    from benchfill.data import responses_from_frame

    frame = pd.DataFrame({"model": ["a", "b"], "item_id": ["q1", "q1"], "n_correct": [1, None], "n_trials": [4, 4]})
    with pytest.raises(InputError, match=r"<DataFrame>: row 2: n_correct=nan is missing, NaN or not a number"):
        responses_from_frame(frame)
    frame = pd.DataFrame({"model": ["a", "b"], "item_id": ["q1", "q1"], "n_correct": [1.0, 2], "n_trials": [4, 4]})
    assert responses_from_frame(frame).n_correct.tolist() == [[1], [2]]


def test_item_groups_quoted_and_short_rows(tmp_path):
    table = write(tmp_path, "t.csv", 'item_id,benchmark,note\nq1,"A, a",x\n\nq2,B\n"q3","A, a"\nq9,C,y\n')
    assert read_item_groups(table, "benchmark", ["q1", "q2", "q3"]) == {"A, a": ["q1", "q3"], "B": ["q2"]}
    with pytest.raises(InputError, match=r"row 1: missing column 'task'"):
        read_item_groups(table, "task", ["q1"])
    with pytest.raises(InputError, match=r"not a valid CSV \(expected 3 fields in line 3, saw 4\)"):
        read_item_groups(write(tmp_path, "u.csv", "item_id,benchmark,note\nq1,A,x\nq2,B,y,z\n"), "benchmark", ["q1"])


def test_one_guessing_rate_for_diagnose_the_designers_and_the_simulated_world():
    """A multi-answer item gets c = 1/(2^k - 1) everywhere (diagnose gave it 1/k while designers gave 1/(2^k - 1));
    a single-answer one 1/k, an item without options 0."""
    from benchfill.designers.generate import DesignedItem
    from benchfill.designers.pipeline import guessing
    from benchfill.irt.model import IRTSpec
    from benchfill.models.sim import SimWorld

    opts = ["w", "x", "y", "z"]
    items = [Item(id="one", question="q", answer="B", choices=opts),
             Item(id="text", question="q", answer="y", choices=opts),
             Item(id="multi", question="q", answer="A, C", choices=opts),
             Item(id="open", question="q", answer="12")]
    want = [0.25, 0.25, 1 / 15, 0.0]
    assert [it.guessing_rate for it in items] == pytest.approx(want)
    assert list(IRTSpec.for_items([it.id for it in items], items).guessing) == pytest.approx(want)
    designed = DesignedItem(id="m", designer="d", slot="s", round=0, spec={}, question="q", answer="A, C",
                            choices=opts, format="mcq_multi")
    assert guessing(designed) == pytest.approx(1 / 15)
    world = SimWorld.from_abilities({"m": -30.0}, {it.id: 0.0 for it in items})
    assert [world.p_correct("m", it) for it in items] == pytest.approx(want, abs=1e-9)


def test_a_wide_dataframe_loads_as_the_same_data_written_as_csv(tmp_path):
    """A wide 0/1 frame (models in the index or the first column, NaN = not attempted) gives the matrix its CSV
    gives; a cell that is not 0/1 is one line naming the model, the item and the row."""
    import pandas as pd

    import benchfill as bf

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.integers(0, 2, (5, 8)), index=[f"m{j}" for j in range(5)],
                         columns=[f"q{i}" for i in range(8)]).astype(float)
    frame.iloc[1, 3] = np.nan
    frame.to_csv(tmp_path / "w.csv", index_label="model")
    from_csv = bf.load_responses(tmp_path / "w.csv")
    for wide in (frame, frame.rename_axis("model").reset_index()):
        got = bf.load_responses(wide)
        assert got.models == from_csv.models and got.item_ids == from_csv.item_ids
        assert (got.n_correct == from_csv.n_correct).all() and (got.n_trials == from_csv.n_trials).all()
    assert got.n_trials.sum() == 39
    bad = frame.astype(object)
    bad.iloc[2, 4] = "x"
    with pytest.raises(InputError, match=r"row 4: wide matrix cell model=m2, q4='x' is not 0/1"):
        bf.load_responses(bad)


# ----------------------------------------------------------------- the plain long CSV's vectorised reader

PLAIN_CASES = {
    "plain": (GOOD, True),
    "no final newline": (GOOD.rstrip("\n"), True),
    "columns reordered, an extra one": ("item_id,n_trials,model,n_correct,note\nq1,4,a,1,x\nq2,4,a,0,\nq1,4,b,4,y y\n"
                                        "q2,4,b,2,z\n", True),
    "spaces inside names": ("model,item_id,n_correct,n_trials\nGPT 4o,q 1,1,4\nGPT 4o,q 2,0,4\nb,q 1,4,4\nb,q 2,2,4\n",
                            True),
    "long ids (hashed)": ("model,item_id,n_correct,n_trials\n" + "".join(
        f"model-{m}-of-the-panel,benchmark/item-{i:05d},{(m + i) % 3},2\n" for m in range(3) for i in (7, 3, 12, 5)),
        True),
    "rows in any order": ("model,item_id,n_correct,n_trials\nb,q2,2,4\na,q1,1,4\nb,q1,4,4\na,q2,0,4\n", True),
    "an unattempted cell": ("model,item_id,n_correct,n_trials\na,q1,1,4\na,q2,0,0\nb,q1,4,4\nb,q2,2,4\n", True),
    "leading zeros": ("model,item_id,n_correct,n_trials\na,q1,001,04\na,q2,0,4\nb,q1,4,4\nb,q2,2,4\n", True),
    "task column": ("model,item_id,n_correct,n_trials,task\na,q1,1,4,t\na,q2,0,4,t\nb,q1,4,4,u\nb,q2,2,4,u\n", False),
    "a blank line": (GOOD.replace("\nb,q1", "\n\nb,q1"), False),
    "CRLF": (GOOD.replace("\n", "\r\n"), False),
    "quotes": (GOOD.replace("a,q1", '"a",q1'), False),
    "a space before a name": (GOOD.replace("b,q1", " b,q1"), False),
    "a float count": (GOOD.replace("a,q1,1,4", "a,q1,1.0,4"), False),
    "a negative count": (GOOD.replace("a,q1,1,4", "a,q1,-1,4"), False),
    "correct > trials": (GOOD.replace("a,q1,1,4", "a,q1,5,4"), False),
    "a duplicate row": (GOOD + "a,q1,1,4\n", False),
    "a short row": (GOOD.replace("a,q1,1,4", "a,q1,1"), False),
    "a long row": (GOOD.replace("a,q1,1,4", "a,q1,1,4,9"), False),
    "an empty model": (GOOD.replace("a,q1,1,4", ",q1,1,4"), False),
    "a never attempted item": (GOOD.replace("a,q2,0,4", "a,q2,0,0").replace("b,q2,2,4", "b,q2,0,0"), False),
    "one model": ("model,item_id,n_correct,n_trials\na,q1,1,4\na,q2,0,4\n", False),
    "header only": ("model,item_id,n_correct,n_trials\n", False),
    "a repeated column": ("model,item_id,n_correct,n_trials,model\na,q1,1,4,z\nb,q1,0,4,z\n", False),
    "non-ASCII": (GOOD.replace("b,", "é,"), False),
}


@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_plain_reader_equals_the_general_one_or_declines(tmp_path, case):
    """The vectorised reader of plain long CSVs gives the general reader's matrix, or declines (None) and the general
    reader reads the file (with its message where a rule is broken)."""
    from pathlib import Path

    from benchfill import data as D

    text, plain = PLAIN_CASES[case]
    path = write(tmp_path, "r.csv", text)
    fast = D._plain_long_csv(Path(path), text, None, 2)
    assert (fast is not None) == plain
    try:
        slow = D._matrix_from_long(Path(path), D._csv_rows(Path(path), text), None, 2)
    except InputError as exc:
        assert fast is None
        with pytest.raises(InputError) as got:
            load_responses(path)
        assert str(got.value) == str(exc)
        return
    if fast is not None:
        assert (fast.models, fast.item_ids, fast.source, fast.meta) == (slow.models, slow.item_ids, slow.source,
                                                                       slow.meta)
        assert np.array_equal(fast.n_correct, slow.n_correct) and np.array_equal(fast.n_trials, slow.n_trials)
    loaded = load_responses(path)
    assert loaded.models == slow.models and np.array_equal(loaded.n_correct, slow.n_correct)


def test_plain_reader_with_an_items_file(tmp_path):
    from pathlib import Path

    from benchfill import data as D

    items = [Item(id=i, question="?", answer="1") for i in ("q2", "q1")]
    path = write(tmp_path, "r.csv", GOOD)
    fast = D._plain_long_csv(Path(path), GOOD, items, 2)
    slow = D._matrix_from_long(Path(path), D._csv_rows(Path(path), GOOD), items, 2)
    assert fast is not None and fast.item_ids == slow.item_ids == ["q2", "q1"]
    assert np.array_equal(fast.n_correct, slow.n_correct)
    extra = items + [Item(id="q9", question="?", answer="1")]  # never attempted: the general reader says so
    assert D._plain_long_csv(Path(path), GOOD, extra, 2) is None
    assert D._plain_long_csv(Path(path), GOOD, items[:1], 2) is None  # q1 unknown
