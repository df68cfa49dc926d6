"""The call cache: keys, secrets, durability, concurrency; and the vLLM backend's batch path against a fake vllm
module that implements the API benchfill calls (LLM.chat, SamplingParams(n=...)), since vllm cannot run here."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import types

import pytest

from benchfill.models.cache import CallCache, call_key, scrub, strip_secrets
from benchfill.models.client import ModelClient
from benchfill.models.config import ModelConfig

MSG = [{"role": "user", "content": "hi"}]


def test_key_depends_on_model_messages_params_and_sample():
    base = call_key("m", MSG, {"temperature": 0.5}, 0)
    assert base == call_key("m", MSG, {"temperature": 0.5}, 0)
    assert base != call_key("m", MSG, {"temperature": 0.5}, 1)
    assert base != call_key("m2", MSG, {"temperature": 0.5}, 0)
    assert base != call_key("m", MSG, {"temperature": 0.6}, 0)
    assert base != call_key("m", [{"role": "user", "content": "hi!"}], {"temperature": 0.5}, 0)
    assert base == call_key("m", MSG, {"temperature": 0.5, "api_key": "sk-1"}, 0)  # secrets never enter the key


def test_strip_secrets_and_scrub():
    params = {"api_key": "a", "aws_secret_access_key": "b", "max_tokens": 5, "token": "c", "api_key_env": "X",
              "extra_headers": {"Authorization": "Bearer z", "X-Trace": "1"}, "top_k": 3}
    assert strip_secrets(params) == {"max_tokens": 5, "api_key_env": "X", "extra_headers": {"X-Trace": "1"},
                                     "top_k": 3}
    assert scrub("header Bearer sk-123456 rejected", ["sk-123456"]) == "header Bearer *** rejected"


def _put(cache: CallCache, key: str, text: str = "t") -> None:
    cache.put(key, model="m", role="panel", sample_index=0, messages=MSG, params={}, text=text, tokens_in=1,
              tokens_out=2, cost=0.5, latency_s=0.1, attempts=1, simulated=False)


def test_put_get_wal_and_grades(tmp_path):
    db = tmp_path / "c.sqlite"
    cache = CallCache(db)
    assert cache.get("k") is None
    _put(cache, "k", "hello")
    hit = cache.get("k")
    assert hit.text == "hello" and hit.tokens_out == 2 and hit.cost == 0.5
    cache.put_grade("k", "item", {"label": "correct", "score": 1.0, "method": "math", "extracted": "5"})
    assert cache.get_grade("k", "item")["label"] == "correct"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cache.close()


def test_commit_survives_kill_9(tmp_path):
    """Each put is committed before it returns: a process killed right after still leaves the row."""
    db = tmp_path / "c.sqlite"
    code = (
        "import os, signal\nfrom benchfill.models.cache import CallCache\n"
        f"c = CallCache({str(db)!r})\n"
        "c.put('k', model='m', role='panel', sample_index=0, messages=[], params={}, text='kept', tokens_in=0, "
        "tokens_out=0, cost=0.0, latency_s=0.0, attempts=1, simulated=False)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert proc.returncode == -9
    assert CallCache(db).get("k").text == "kept"


def test_many_coroutines_and_a_second_process(tmp_path):
    db = tmp_path / "c.sqlite"
    cache = CallCache(db)

    async def write(i: int) -> None:
        await asyncio.sleep(0)
        _put(cache, f"k{i}")

    async def go():
        await asyncio.gather(*(write(i) for i in range(200)))

    asyncio.run(go())
    other = CallCache(db)  # another connection (another process would be the same) sees every row
    assert all(other.get(f"k{i}") is not None for i in range(200))
    assert cache.totals()["attempts"] == {"ok": 200}


# ----------------------------------------------------------------------------------------------- vLLM (fake)


class _FakeOutput:
    def __init__(self, text, n_tokens):
        self.text, self.token_ids = text, list(range(n_tokens))


class _FakeRequestOutput:
    def __init__(self, prompt_len, outs):
        self.prompt_token_ids, self.outputs = list(range(prompt_len)), outs


@pytest.fixture
def fake_vllm(monkeypatch):
    calls = []

    class SamplingParams:
        def __init__(self, n=1, **kw):
            self.n, self.kw = n, kw

    class LLM:
        def __init__(self, model, **kw):
            calls.append(("init", model, kw))

        def chat(self, messages, sampling_params=None, use_tqdm=True, **kw):
            calls.append(("chat", len(messages), [p.n for p in sampling_params], sampling_params[0].kw, kw))
            return [_FakeRequestOutput(7, [_FakeOutput(f"{conv[-1]['content']} #{j} \\boxed{{1}}", 3)
                                           for j in range(p.n)])
                    for conv, p in zip(messages, sampling_params)]

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return calls


def test_vllm_backend_batches_rollouts_through_the_cache(fake_vllm, tmp_path):
    model = ModelConfig(model="vllm/some/model", temperature=0.6, max_tokens=64, rollouts=3, seed=5,
                        vllm_engine={"tensor_parallel_size": 2, "batch_prompts": 2},
                        params={"chat_template_kwargs": {"enable_thinking": False}})
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]

    async def go():
        client = ModelClient(tmp_path / "c.sqlite")
        await client.prefetch(model, [(p, range(3)) for p in prompts])
        results = [await client.complete_rollouts(model, p) for p in prompts]
        await client.aclose()
        return results

    results = asyncio.run(go())
    inits = [c for c in fake_vllm if c[0] == "init"]
    chats = [c for c in fake_vllm if c[0] == "chat"]
    assert inits == [("init", "some/model", {"tensor_parallel_size": 2, "seed": 5})]
    assert [c[1] for c in chats] == [2, 1]  # batch_prompts = 2
    assert chats[0][2] == [3, 3]  # SamplingParams(n=rollouts) per prompt
    assert chats[0][3] == {"temperature": 0.6, "max_tokens": 64, "seed": 5}
    assert chats[0][4] == {"chat_template_kwargs": {"enable_thinking": False}}
    # drawn by the prefetch batch (no further engine call), reported once as calls made now
    assert all(not r.cached and r.attempts == 1 for rs in results for r in rs)
    assert [r.text.split(" \\")[0] for r in results[1]] == ["q1 #0", "q1 #1", "q1 #2"]
    assert results[0][0].tokens_in == 7 and results[0][0].tokens_out == 3

    async def again():
        client = ModelClient(tmp_path / "c.sqlite")
        out = await client.complete_rollouts(model, prompts[0], n=4)  # one more rollout: only it is sampled
        await client.aclose()
        return out

    more = asyncio.run(again())
    assert [c[2] for c in fake_vllm if c[0] == "chat"][-1] == [1]
    assert sum(not r.cached for r in more) == 1


def test_vllm_is_not_imported_at_module_import():
    code = ("import sys\nimport benchfill.models.vllm_backend, benchfill.models.client, benchfill.models.evaluate\n"
            "import benchfill.cli\nassert 'vllm' not in sys.modules\nassert 'litellm' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
