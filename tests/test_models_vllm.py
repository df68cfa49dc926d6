"""The vLLM backend without vLLM or a GPU: a stand-in ``vllm`` module at the boundary (``LLM``, ``SamplingParams``,
``LLM.chat``, ``LLM.get_default_sampling_params``) checks the requests benchfill builds — one ``n = 1`` request per
missing rollout with seed ``cfg.seed + k``, max_tokens required, the model's generation defaults under the
config's fields — and that a second model's engine starts only after the first one's process has ended."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from benchfill.errors import InputError
from benchfill.models.client import ModelClient
from benchfill.models.config import ModelConfig, config_from_dict, validate_config
from benchfill.models.vllm_backend import VLLMBackend, build_requests, request_kwargs

# The stand-in: what benchfill calls of vLLM, with vLLM's documented behaviour where it matters (SamplingParams'
# max_tokens default of 16; one output per n = 1 request; the model's generation defaults).
FAKE_VLLM = textwrap.dedent('''
    import os
    EVENTS = []

    class SamplingParams:
        def __init__(self, n=1, max_tokens=16, seed=None, **kw):
            self.n, self.max_tokens, self.seed, self.kw = n, max_tokens, seed, kw
            for k, v in kw.items():
                setattr(self, k, v)

    class _Out:
        def __init__(self, text, n_tokens, finish):
            self.text, self.token_ids, self.finish_reason = text, list(range(n_tokens)), finish

    class _Req:
        def __init__(self, outs):
            self.prompt_token_ids, self.outputs = list(range(7)), outs

    class LLM:
        def __init__(self, model, **kw):
            EVENTS.append(("init", model, kw, os.getpid()))
            self.model = model

        def get_default_sampling_params(self):
            return SamplingParams(temperature=0.7, top_k=20)  # from the model's generation_config.json

        def chat(self, messages, sampling_params=None, use_tqdm=True, **kw):
            EVENTS.append(("chat", [dict(n=p.n, seed=p.seed, max_tokens=p.max_tokens, **p.kw)
                                    for p in sampling_params], kw))
            return [_Req([_Out(f"{conv[-1]['content']} seed={p.seed} \\\\boxed{{1}}", 3,
                               "length" if p.max_tokens < 8 else "stop") for _ in range(p.n)])
                    for conv, p in zip(messages, sampling_params)]
''')


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """The stand-in importable in this process and in spawned engine processes."""
    pkg = tmp_path / "fakevllm"
    pkg.mkdir()
    (pkg / "vllm.py").write_text(FAKE_VLLM)
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.setenv("PYTHONPATH", str(pkg) + ":" + __import__("os").environ.get("PYTHONPATH", ""))
    sys.modules.pop("vllm", None)
    import vllm

    yield vllm
    sys.modules.pop("vllm", None)


def vcfg(**kw) -> ModelConfig:
    base = dict(model="vllm/some/model", temperature=0.6, max_tokens=64, rollouts=3, seed=5)
    base.update(kw)
    return ModelConfig(**base)


def test_one_request_per_missing_rollout_with_its_own_seed():
    cfg = vcfg()
    reqs = build_requests(cfg, [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                          [[3, 4, 5], [0]], cfg.sampling_params(), {"temperature": 0.7, "top_k": 20})
    assert [(i, k) for i, k, _, _ in reqs] == [(0, 3), (0, 4), (0, 5), (1, 0)]
    assert all(kw["n"] == 1 for *_, kw in reqs)
    assert [kw["seed"] for *_, kw in reqs] == [8, 9, 10, 5]  # seed + k: what child k of an n-request would get
    # the config's fields win; what it leaves out comes from the model's generation defaults
    assert reqs[0][3] == {"temperature": 0.6, "max_tokens": 64, "top_k": 20, "n": 1, "seed": 8}


def test_max_tokens_is_required_never_vllms_default_of_16():
    cfg = vcfg(max_tokens=None)
    with pytest.raises(InputError, match="max_tokens"):
        request_kwargs(cfg, cfg.sampling_params(), 0, {"temperature": 0.7})
    conf = config_from_dict({"panel": [{"model": "vllm/some/model", "rollouts": 2}]}, "c.toml")
    with pytest.raises(InputError, match=r"panel\[0\]\.max_tokens: required for vllm/ models"):
        validate_config(conf)  # with the config, before any engine starts (vllm need not even be installed)


def test_a_resumed_run_draws_only_the_missing_rollouts_never_redraws_old_ones(fake_vllm, tmp_path):
    cfg = vcfg()
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    db = tmp_path / "c.sqlite"

    async def go(n):
        client = ModelClient(db, vllm=VLLMBackend(isolate=False))
        await client.prefetch(cfg, [(p, range(n)) for p in prompts])
        out = [await client.complete_rollouts(cfg, p, n=n) for p in prompts]
        await client.aclose()
        return out

    first = asyncio.run(go(3))
    chats = [e for e in fake_vllm.EVENTS if e[0] == "chat"]
    assert len(chats) == 1 and len(chats[0][1]) == 9  # 3 prompts x 3 rollouts, one request each, one engine call
    assert [r["seed"] for r in chats[0][1]] == [5, 6, 7] * 3 and {r["n"] for r in chats[0][1]} == {1}
    assert [r.text.split(" \\")[0] for r in first[1]] == ["q1 seed=5", "q1 seed=6", "q1 seed=7"]
    more = asyncio.run(go(5))  # two more rollouts per prompt: only those are drawn, with seeds 8 and 9
    chats = [e for e in fake_vllm.EVENTS if e[0] == "chat"]
    assert len(chats) == 2 and [r["seed"] for r in chats[1][1]] == [8, 9] * 3
    texts = [r.text for r in more[0]]
    assert len(set(texts)) == 5  # no rollout stored twice as a "new" trial
    assert sum(not r.cached for rs in more for r in rs) == 6


def test_finish_reason_length_reaches_the_cache(fake_vllm, tmp_path):
    cfg = vcfg(max_tokens=4)

    async def go():
        client = ModelClient(tmp_path / "c.sqlite", vllm=VLLMBackend(isolate=False))
        out = await client.complete_rollouts(cfg, [{"role": "user", "content": "x"}], n=1)
        await client.aclose()
        return out

    assert asyncio.run(go())[0].finish_reason == "length"


def test_one_model_at_a_time_each_engine_in_its_own_process(fake_vllm):
    import os

    backend = VLLMBackend(isolate=True)
    a, b = vcfg(model="vllm/model-a"), vcfg(model="vllm/model-b")
    try:
        out_a = backend.generate(a, [[{"role": "user", "content": "x"}]], [[0, 1]], a.sampling_params())
        proc_a = backend._engine.process
        assert proc_a.is_alive() and proc_a.pid != os.getpid()
        out_b = backend.generate(b, [[{"role": "user", "content": "y"}]], [[0]], b.sampling_params())
        assert not proc_a.is_alive()  # the first engine's process ended before the second model started
        assert backend.started == ["vllm/model-a", "vllm/model-b"]
        assert [s.text.split(" \\")[0] for s in out_a[0]] == ["x seed=5", "x seed=6"]
        assert out_b[0][0].tokens_in == 7 and out_b[0][0].tokens_out == 3
        backend.generate(b, [[{"role": "user", "content": "z"}]], [[0]], b.sampling_params())
        assert backend.started == ["vllm/model-a", "vllm/model-b"]  # same model: the engine is kept
    finally:
        backend.close()
    assert backend._engine is None
