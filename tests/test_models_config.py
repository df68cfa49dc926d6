"""Run config: TOML / YAML loading, defaults, field-named errors, and validation before any call."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchfill.errors import InputError
from benchfill.models.config import load_config, validate_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_roles_and_defaults(tmp_path):
    cfg = load_config(write(tmp_path, """
[defaults]
api_base = "http://localhost:8000/v1"
timeout = 30

[judge]
model = "openai/gpt-4o"
api_key_env = "OPENAI_API_KEY"
api_base = "https://llm-gateway.internal.test/v1"

[[panel]]
model = "hosted_vllm/Qwen/QwQ-32B"
temperature = 0.6
top_p = 0.95
rollouts = 8

[[panel]]
model = "hosted_vllm/microsoft/phi-4"
name = "phi-4"
params = { top_k = 20 }
"""))
    assert [p.label for p in cfg.panel] == ["hosted_vllm/Qwen/QwQ-32B", "phi-4"]
    assert cfg.panel[0].api_base == "http://localhost:8000/v1" and cfg.panel[0].timeout == 30
    assert cfg.judge.api_base == "https://llm-gateway.internal.test/v1"  # a role's own value beats the default
    assert cfg.panel[0].sampling_params() == {"temperature": 0.6, "top_p": 0.95}
    assert cfg.panel[1].sampling_params() == {"top_k": 20}
    assert cfg.panel[0].is_local()


def test_yaml_is_read_too(tmp_path):
    cfg = load_config(write(tmp_path, "panel:\n  - model: sim/a\n    rollouts: 2\nsim:\n  abilities: {a: 1.0}\n",
                            "run.yaml"))
    assert cfg.panel[0].rollouts == 2 and cfg.simulated


@pytest.mark.parametrize("text,fragment", [
    ("[[panel]]\nmodel = 'sim/a'\ntemprature = 0.5\n", "panel[0].temprature: unknown field"),
    ("[[panel]]\nmodel = 'sim/a'\ntemperature = 'hot'\n", "panel[0].temperature"),
    ("[[panel]]\nmodel = 'sim/a'\nrollouts = 0\n", "panel[0].rollouts"),
    ("[judge]\nmodel = 'openai/gpt-4o'\napi_key = 'sk-123'\n", "judge.api_key: API keys must not be written"),
    ("[[panel]]\nmodel = 'sim/a'\n[[panel]]\nmodel = 'sim/a'\n", "duplicate panel model name"),
    ("[[panel]]\nmodel = 'sim/a'\nparams = { api_key = 'x' }\n", "API keys must not be written"),
    ("[[panel]\nmodel = 'x'\n", "invalid TOML"),
    ("[grader]\ntemperature = 0\n", "[grader].model: required, missing"),
])
def test_bad_config_names_file_and_field(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert fragment in str(err.value) and str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_unknown_model_string_fails_validation(tmp_path):
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'definitely-not-a-provider/foo'\n"))
    with pytest.raises(InputError, match=r"panel\[0\].model: unknown model string"):
        validate_config(cfg)


def test_missing_key_env_fails_validation(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHFILL_NOPE_KEY", raising=False)
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'openai/gpt-4o'\napi_key_env = 'BENCHFILL_NOPE_KEY'\n"))
    with pytest.raises(InputError, match="BENCHFILL_NOPE_KEY is not set"):
        validate_config(cfg)
    monkeypatch.setenv("BENCHFILL_NOPE_KEY", "sk-x")
    validate_config(cfg)


def test_provider_key_detected_without_api_key_env(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'anthropic/claude-3-5-sonnet-20240620'\n"))
    with pytest.raises(InputError, match="ANTHROPIC_API_KEY"):
        validate_config(cfg)


def test_local_server_needs_no_key(tmp_path):
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'openai/my-local'\napi_base = 'http://127.0.0.1:8000/v1'\n"
                                      "[[panel]]\nmodel = 'hosted_vllm/x'\napi_base = 'http://gpu-node-7:8000/v1'\n"))
    validate_config(cfg)


def test_sim_panel_needs_an_ability(tmp_path):
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'sim/a'\n[sim.abilities]\nb = 1.0\n"))
    with pytest.raises(InputError, match="has no ability"):
        validate_config(cfg)


def test_vllm_backend_needs_the_extra(tmp_path):
    pytest.importorskip("pytest")
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    cfg = load_config(write(tmp_path, "[[panel]]\nmodel = 'vllm/Qwen/Qwen3-8B'\nmax_tokens = 4096\n"))
    with pytest.raises(InputError, match=r"benchfill\[vllm\]"):
        validate_config(cfg)


def test_empty_panel(tmp_path):
    cfg = load_config(write(tmp_path, "[judge]\nmodel = 'sim/j'\n"))
    with pytest.raises(InputError, match="no panel models"):
        validate_config(cfg)


@pytest.mark.parametrize("name", ["sim.toml", "paper.toml", "panel_router.toml"])
def test_example_configs_load(name):
    cfg = load_config(EXAMPLES / name)
    assert cfg.panel


def test_paper_config_reproduces_the_setup():
    cfg = load_config(EXAMPLES / "paper.toml")
    assert cfg.rewriter.model.endswith("MiniMax-M2.7") and cfg.rewriter.temperature == 1.0
    assert "gpt-5.4" in cfg.judge.model
    assert len(cfg.panel) == 12
    names = " ".join(p.model for p in cfg.panel)
    for expected in ["Qwen3.5-397B-A17B", "GLM-4.6", "GLM-4.5-Air", "Qwen3-Next-80B-A3B-Instruct", "QwQ-32B",
                     "Olmo-3.1-32B-Think", "gpt-oss-20b", "phi-4", "Llama-3.1-8B-Instruct", "vicuna-7b-v1.5",
                     "Llama-3.2-3B-Instruct", "SmolLM2-1.7B-Instruct"]:
        assert expected in names
    assert all(p.model.startswith("hosted_vllm/") and p.api_base for p in cfg.panel)
    assert {p.rollouts for p in cfg.panel} == {8}


def test_sim_example_validates():
    validate_config(load_config(EXAMPLES / "sim.toml"), need=("panel", "rewriter", "judge"))


# ---- every setting typed and ranged, one line naming the field --------------------------------------------

BAD_SETTINGS = [
    ("[fill]\nparents = 0", "[fill].parents: must be >= 1"),
    ("[fill]\ntolerance = -0.1", "[fill].tolerance: must be >= 0"),
    ("[fill]\ntolerance = 2.0", "[fill].tolerance: must be <= 1"),
    ('[fill]\nchildren_per_parent = "four"', "[fill].children_per_parent: must be an integer (got 'four')"),
    ("[fill]\nchildren_per_parent = 2.5", "[fill].children_per_parent: must be an integer"),
    ("[fill]\nmax_rounds = 0", "[fill].max_rounds: must be >= 1"),
    ("[fill]\nreferences = -1", "[fill].references: must be >= 0"),
    ("[fill]\nseed_items = 0", "[fill].seed_items: must be >= 1"),
    ('[fill]\nsequential = "yes"', "[fill].sequential: must be true or false"),
    ("[fill]\ndisplay_scale = 0", "[fill].display_scale: must be > 0"),
    ("[fill]\nsim_panel_rollouts = 0", "[fill].sim_panel_rollouts: must be >= 1"),
    ("[fill]\nparent = 4", "[fill].parent: unknown field"),
    ("[sim]\nstep = 1.5", "[sim].step: must be <= 1"),
    ("[sim]\ninvalid_rate = -0.1", "[sim].invalid_rate: must be >= 0"),
    ("[sim]\nb_range = [2.0, 1.0]", "[sim]: b_range: must be [low, high] with low < high"),
    ('[judge]\nmodel = "sim/j"\ntemperature = -1', "[judge].temperature: must be >= 0"),
    ('[judge]\nmodel = "sim/j"\ntop_p = 1.5', "[judge].top_p: must be <= 1"),
    ('[judge]\nmodel = "sim/j"\nmax_tokens = 0', "[judge].max_tokens: must be > 0"),
    ('[judge]\nmodel = "sim/j"\nmax_concurrency = 0', "[judge].max_concurrency: must be >= 1"),
    ('[judge]\nmodel = "sim/j"\ntimeout = 0', "[judge].timeout: must be > 0"),
    ('[judge]\nmodel = "sim/j"\nmax_retries = -1', "[judge].max_retries: must be >= 0"),
    ('[judge]\nmodel = "sim/j"\nbackoff_initial = 5\nbackoff_max = 1',
     "[judge]: backoff_max: must be >= backoff_initial"),
    ('[[panel]]\nmodel = "sim/a"\nrollouts = 0', "panel[0].rollouts: must be >= 1"),
    ("[defaults]\ntimeout = -5\n[judge]\nmodel = \"sim/j\"", "[judge].timeout: must be > 0"),
    ('seed = "x"', "seed: must be an integer (got 'x')"),
    ("[prompts]\nrewrite = 3", "[prompts].rewrite: must be a string (got 3)"),
]


@pytest.mark.parametrize("body,line", BAD_SETTINGS, ids=[b.split("\n")[-1][:30] for b, _ in BAD_SETTINGS])
def test_every_setting_is_typed_and_ranged_with_one_line_naming_it(tmp_path, body, line):
    path = tmp_path / "c.toml"
    path.write_text(body + "\n")
    with pytest.raises(InputError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {line}" or str(err.value).startswith(f"{path}: {line}"), str(err.value)
    assert "\n" not in str(err.value)
