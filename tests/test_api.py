"""The Python API (`import benchfill as bf`): the commands as typed functions with the CLI's defaults, usable from a
notebook (inside a running event loop) and writing the same artifacts as the CLI."""

from __future__ import annotations

import asyncio
import json

import pytest

import benchfill as bf
from benchfill.data import ResponseMatrix
from benchfill.errors import InputError
from benchfill.irt.model import SamplerSettings


def test_one_default_sampler_for_library_and_cli():
    from benchfill import api

    assert SamplerSettings().method == api.DEFAULT_SAMPLER == "fast"


def test_load_diagnose_save_place_from_python(examples, tmp_path):
    resp = bf.load_responses(examples / "math500.responses.csv.gz", models=12)
    assert isinstance(resp, ResponseMatrix) and resp.shape == (12, 500)
    again = bf.load_responses(resp.to_long())  # a long DataFrame reads like the file
    assert again.models == resp.models and (again.n_correct == resp.n_correct).all()
    dx = bf.diagnose(resp, draws=300, tune=300)
    assert isinstance(dx, bf.Diagnosis) and dx.sampler.method == "fast" and dx.posterior is not None
    assert json.loads(dx.to_json())["schema_version"] == 2
    assert dx.plot().axes  # a matplotlib Figure for a notebook
    path = dx.save(tmp_path / "m500")
    assert {p.name for p in (tmp_path / "m500").iterdir()} == {"diagnosis.json", "diagnosis.png",
                                                              "diagnosis.scale.npz"}
    assert bf.Diagnosis.model_validate_json(path.read_text()).ddm == pytest.approx(dx.ddm)
    placed = bf.place(tmp_path / "m500" / "diagnosis.scale.npz", resp.subset(items=resp.item_ids[:4]))
    assert [p.item_id for p in placed.items] == resp.item_ids[:4]
    # an item of the benchmark placed on its own scale lands where the diagnosis put it
    assert placed.items[0].d == pytest.approx(dx.items[0].d, abs=0.05)


def test_bad_dataframe_is_one_input_error_naming_the_row(examples):
    frame = bf.load_responses(examples / "math500.responses.csv.gz").to_long()
    frame.loc[3, "n_correct"] = -1
    with pytest.raises(InputError, match="row 4.*negative"):
        bf.load_responses(frame)


def test_evaluate_and_fill_work_inside_a_running_event_loop(examples, tmp_path):
    """Jupyter runs cells inside an event loop, where asyncio.run fails: the sync wrappers still work, and the
    async forms can be awaited."""

    async def notebook_cell():
        result = bf.evaluate(examples / "math500.items.jsonl", examples / "sim.toml", tmp_path / "eval", limit=5)
        again = await bf.evaluate_async(examples / "math500.items.jsonl", examples / "sim.toml", tmp_path / "eval",
                                        limit=5)
        return result, again

    result, again = asyncio.run(notebook_cell())
    assert result.complete and result.n_items == 5 and again.calls_made == 0  # the rerun is served by the cache
    summary = asyncio.run(_fill_in_loop(examples, tmp_path))
    assert summary["methods"]["benchfill"]["gaps"]


async def _fill_in_loop(examples, tmp_path):
    return bf.fill(examples / "math500.items.jsonl", examples / "math500_k4.responses.csv.gz",
                   examples / "fill_sim.toml", tmp_path / "fill", gaps=1, sampler="map")
