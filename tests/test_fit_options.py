"""Bad fit options are the library's InputError, one line naming the option, before any data is read or any fit
starts (benchfill.api.check_fit_options; the CLI's messages are the same: tests/test_cli_friction.py)."""

from __future__ import annotations

import numpy as np
import pytest

import benchfill as bf
from benchfill import api
from benchfill.errors import InputError, missing_module

MISSING = "no-such-responses.csv"  # never read: the options are checked first


@pytest.fixture(autouse=True)
def no_fit_no_read(monkeypatch):
    """A check that let a bad option through would reach one of these: the test fails loudly instead."""
    import benchfill.diagnostics.report as report

    def boom(*args, **kwargs):
        raise AssertionError("a fit (or a read) started despite a bad option")

    monkeypatch.setattr(report, "diagnose", boom)
    monkeypatch.setattr(api, "load_responses", boom)


BAD = [
    ({"chains": 0}, "--chains: 0: must be at least 1"),
    ({"chains": -3}, "--chains: -3: must be at least 1"),
    ({"draws": 0}, "--draws: 0: must be at least 1"),
    ({"tune": -1}, "--tune: -1: must be at least 0"),
    ({"top_gaps": 0}, "--top-gaps: 0: must be at least 1"),
    ({"chains": 2.0}, "--chains: 2.0: must be a whole number"),
    ({"draws": True}, "--draws: True: must be a whole number"),
    ({"sampler": "nuts"}, "--sampler: 'nuts'"),
    ({"sampler": "fsat"}, "did you mean 'fast'"),
    ({"sampler": None}, "--sampler: None: a sampler is named by a string"),
    ({"guessing": 1.0}, "--guessing: 1: a guessing rate must lie in [0, 1)"),
    ({"guessing": -0.1}, "--guessing: -0.1: a guessing rate must lie in [0, 1)"),
    ({"guessing": float("nan")}, "--guessing: nan: a guessing rate must lie in [0, 1)"),
    ({"guessing": "high"}, "--guessing: 'high': a guessing rate is a number in [0, 1)"),
    ({"choices": 1}, "--choices: 1: multiple choice needs at least 2 options"),
    ({"choices": 4.0}, "--choices: 4.0: must be a whole number"),
    ({"guessing": 0.25, "choices": 4}, "--guessing/--choices: give one of them, not both"),
]


@pytest.mark.parametrize("options, message", BAD)
def test_diagnose_rejects_a_bad_option_before_reading_or_fitting(options, message) -> None:
    with pytest.raises(InputError) as err:
        bf.diagnose(MISSING, **options)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("--")  # names the option


@pytest.mark.parametrize("options, message", [
    (o, m) for o, m in BAD if "guessing" not in o and "top_gaps" not in o])
def test_suite_rejects_a_bad_option_before_reading_or_fitting(options, message) -> None:
    with pytest.raises(InputError, match="^--") as err:
        bf.suite(MISSING, **options)
    assert message in str(err.value)


def test_the_nuts_hint_and_the_messages_are_the_clis() -> None:
    with pytest.raises(InputError, match=r"NUTS is pymc, nutpie or numpyro"):
        api.check_fit_options("NUTS")
    # tests/test_cli_friction.py pins these for `benchfill diagnose`
    for options, line in (({"guessing": 1.5}, "--guessing: 1.5: a guessing rate must lie in [0, 1)"),
                          ({"chains": 0}, "--chains: 0: must be at least 1"),
                          ({"draws": 0}, "--draws: 0: must be at least 1")):
        with pytest.raises(InputError) as err:
            api.check_fit_options("fast", **options)
        assert str(err.value) == line


def test_place_checks_the_guessing_rate_before_loading_the_scale() -> None:
    with pytest.raises(InputError, match=r"^--guessing: 1.5: a guessing rate must lie in \[0, 1\)$"):
        bf.place("no-such.scale.npz", MISSING, guessing=1.5)


@pytest.mark.skipif(missing_module("llm") is not None, reason="fill needs the llm extra")
@pytest.mark.parametrize("sampler, message", [("nuts", "NUTS is pymc"), ("fsat", "did you mean 'fast'")])
def test_fill_run_rejects_an_unknown_sampler_before_the_run(tmp_path, sampler, message) -> None:
    with pytest.raises(InputError, match="^--sampler: ") as err:
        api.fill_run(tmp_path / "items.jsonl", tmp_path / MISSING, tmp_path / "fill.toml", tmp_path / "out",
                     sampler=sampler)
    assert message in str(err.value) and not (tmp_path / "out").exists()


def test_good_options_pass() -> None:
    api.check_fit_options()  # nothing given: nothing checked; "" is the default sampler
    api.check_fit_options("fast", chains=np.int64(2), tune=0, draws=1, guessing=0.0, top_gaps=1)
    api.check_fit_options("fast", guessing=np.float64(0.999), choices=None)
    api.check_fit_options("fast", choices=np.int32(2))
