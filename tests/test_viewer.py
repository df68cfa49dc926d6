"""The run viewer: report.html is self-contained (no network), carries a known run's gaps, searches and chosen items,
prints model-written text literally, and `benchfill view` stores review votes in the memory bank.

The browser tests run Debian's chromium headless (`apt-get install chromium`) and are skipped, with the reason,
where it is absent; the HTML and the server are also checked without a browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from benchfill.memory.bank import MemoryBank
from benchfill.viewer import report_data
from benchfill.viewer.server import ViewServer

REPO = Path(__file__).resolve().parents[1]
NASTY = "</script><script>alert(1)</script> [/INST] <b>not bold</b> \\[\\sin x\\]"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not installed (Debian: apt-get install -y chromium): browser test skipped")


@pytest.fixture(scope="module")
def known_run(tmp_path_factory):
    """A finished simulated fill (3 gaps, with the baseline) whose first chosen item's text holds HTML and markup."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_fill import fill, make_benchmark, write_config

    folder = tmp_path_factory.mktemp("viewer")
    items, resp = make_benchmark(folder)
    res = fill(items, resp, write_config(folder), folder / "out", "--compare")
    assert res.exit_code == 0, res.output
    out = folder / "out"
    assert (out / "report.html").stat().st_size > 10_000  # fill writes the report
    bank = MemoryBank(out / "memory.sqlite")
    first = bank.gap("benchfill", 1).chosen
    c = bank.candidate(first)
    bank.update_candidate(first, question=f"{c.question} {NASTY}")
    bank.close()
    from typer.testing import CliRunner

    from benchfill.cli import app

    res = CliRunner().invoke(app, ["view", str(out), "--no-serve"])  # rewrites report.html
    assert res.exit_code == 0 and "report.html" in res.output, res.output
    return out


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False if tag == "script" else self._in_script

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def test_fill_writes_a_self_contained_report(known_run):
    html = (known_run / "report.html").read_text()
    p = _Collect()
    p.feed(html)
    assert len(p.scripts) == 3  # the data, the bundled KaTeX and the code: the model's "</script>" opened no fourth
    for tag, attrs in p.tags:
        assert "src" not in attrs, (tag, attrs)  # nothing loaded from anywhere
        assert not (tag == "link"), attrs
    # no CDN, no network (the only URLs are the SVG and MathML namespaces, which nothing loads)
    assert not re.search(r"https?://(?!www\.w3\.org/(?:2000/svg|1998/Math/MathML))", html)
    data = json.loads(p.scripts[0])
    bank = MemoryBank(known_run / "memory.sqlite")
    chosen = [g.chosen for g in bank.gaps("benchfill")]
    assert [t["chosen"] for t in data["methods"]["benchfill"]] == chosen
    assert [q["candidate"] for q in data["queue"]] == chosen
    assert NASTY in data["queue"][0]["question"]  # the text survives whole
    assert len(data["diagnosis"]["d"]) == 40 and data["tolerance"] == 0.01
    assert set(data["methods"]) == {"benchfill", "baseline"}


def test_report_data_matches_the_trace(known_run):
    from benchfill.memory.trace import gap_trace

    data = report_data(known_run)
    bank = MemoryBank(known_run / "memory.sqlite")
    assert data["methods"]["benchfill"][1] == json.loads(gap_trace(bank, "benchfill", 2).model_dump_json())


def test_server_stores_votes_only_with_the_token(known_run):
    server = ViewServer(known_run).serve_in_thread()
    try:
        page = urllib.request.urlopen(server.url, timeout=10).read().decode()
        assert server.token in page and '"served": true' in page
        bank = MemoryBank(known_run / "memory.sqlite")
        cid = bank.gap("benchfill", 2).chosen

        def post(body, token):
            req = urllib.request.Request(server.url + "api/review", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", "X-Benchfill-Token": token})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        assert post({"candidate": cid, "reviewer": "x", "decision": "approve"}, "wrong")[0] == 403
        rebound = urllib.request.Request(server.url, headers={"Host": "evil.example:80"})
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(rebound, timeout=10)
        assert exc.value.code == 403  # a page on another domain, rebound to 127.0.0.1, gets nothing
        assert post({"candidate": "nope", "reviewer": "x", "decision": "approve"}, server.token)[0] == 400
        assert post({"candidate": cid, "reviewer": "", "decision": "approve"}, server.token)[0] == 400
        code, out = post({"candidate": cid, "reviewer": "ann", "decision": "reject", "note": "n"}, server.token)
        assert code == 200 and out["status"] == "blocked"
        assert MemoryBank(known_run / "memory.sqlite").reviews(cid)[0].reviewer == "ann"
    finally:
        server.close()


def _dump_dom(url: str, tmp: Path) -> str:
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow  # > 5 s: the full suite (CI) runs it, the fast lane does not
def test_chromium_shows_the_gaps_and_the_chosen_items(known_run, tmp_path):
    dom = _dump_dom((known_run / "report.html").as_uri(), tmp_path)
    assert 'data-ready="true"' in dom
    bank = MemoryBank(known_run / "memory.sqlite")
    for g in bank.gaps("benchfill"):
        assert f'id="gap-benchfill-{g.gap}"' in dom
        assert re.search(rf'id="cand-benchfill-{re.escape(g.chosen)}"[^>]*data-chosen="true"', dom), g.chosen
        assert f'data-candidate="{g.chosen}"' in dom  # on the after-axis and in the queue
    assert dom.count('class="card child chosen"') == len(bank.gaps("benchfill")) + len(bank.gaps("baseline"))
    # the model's HTML is text, not markup: escaped in the DOM, no injected element
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; [/INST] &lt;b&gt;not bold&lt;/b&gt;" in dom
    assert "<b>not bold</b>" not in dom
    # the math is typeset by the bundled KaTeX (offline), its source kept on the element (a click shows it)
    assert re.search(r'<span class="tex math" data-src="\\\[\\sin x\\\]" title="click: LaTeX source">'
                     r'<span class="katex-display">', dom), re.findall(r'<span class="tex[^>]*>.{0,80}', dom)[:3]
    assert '>\\[\\sin x\\]</span>' not in dom  # not shown as its source text
    assert 'data-label="before"' in dom and 'data-label="after"' in dom


def test_chromium_review_vote_is_stored(known_run, tmp_path):
    websockets = pytest.importorskip("websockets.sync.client", reason="websockets not installed: CDP test skipped")
    exe = chromium()
    bank = MemoryBank(known_run / "memory.sqlite")
    cid = bank.gap("benchfill", 3).chosen
    server = ViewServer(known_run).serve_in_thread()
    proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={tmp_path / 'profile'}", "--remote-debugging-port=0", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ws_url = None
        deadline = time.time() + 60
        while ws_url is None and time.time() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            ws_url = m.group(1) if m else None
        assert ws_url, "chromium printed no DevTools address"
        port = re.search(r":(\d+)/", ws_url).group(1)
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        with websockets.connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            counter = iter(range(1, 10_000))

            def call(method, **params):
                mid = next(counter)
                ws.send(json.dumps({"id": mid, "method": method, "params": params}))
                while True:
                    msg = json.loads(ws.recv(timeout=30))
                    if msg.get("id") == mid:
                        return msg.get("result", {})

            def js(expr):
                return call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)["result"].get("value")

            call("Page.navigate", url=server.url)
            for _ in range(100):
                if js("document.body && document.body.dataset.ready") == "true":
                    break
                time.sleep(0.1)
            card = f"document.querySelector('.queued[data-candidate=\"{cid}\"]')"
            assert js(f"{card}.querySelector('[data-role=status]').textContent") == "pending"
            js(f"{card}.querySelector('[data-role=reviewer]').value = 'chromium'; "
               f"{card}.querySelector('[data-role=note]').value = 'looks right'; "
               f"{card}.querySelector('[data-role=approve]').click(); true")
            for _ in range(100):
                if js(f"{card}.querySelector('[data-role=msg]').textContent") == "stored":
                    break
                time.sleep(0.1)
            assert js(f"{card}.querySelector('[data-role=msg]').textContent") == "stored"
            assert "chromium: approve" in js(f"{card}.querySelector('[data-role=votes]').textContent")
        votes = MemoryBank(known_run / "memory.sqlite").reviews(cid)
        assert [(v.reviewer, v.decision, v.note) for v in votes] == [("chromium", "approve", "looks right")]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        server.close()


def test_view_command_serves_on_localhost_and_stops_on_ctrl_c(known_run):
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "benchfill.cli", "view", str(known_run)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "report.html" in proc.stdout.readline()
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", line).group(1)
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert '"served": true' in page and 'id="data"' in page
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in out and "Traceback" not in err


def _planted_run(folder: Path) -> Path:
    """A run folder with only a diagnosis: 5 of its 7 items share d = 0.5 (no search yet)."""
    items = [{"item_id": f"i{k}", "b": 0.0, "b_sd": 0.1, "d": d} for k, d in enumerate([0.0] + [0.5] * 5 + [1.0])]
    (folder / "diagnosis.json").write_text(json.dumps({"source": "planted.csv", "n_items": 7, "n_models": 3,
                                                       "ddm": 0.1, "max_gap": 0.5, "top5_sum": 1.0,
                                                       "items": items, "gaps": []}))
    return folder


def test_item_positions_count_the_items_that_share_a_d(tmp_path):
    from benchfill.viewer.report import item_positions

    assert item_positions([0.5, 0.1, 0.5, 0.5 + 1e-13, 0.9]) == [(0.1, 1), (0.5, 3), (0.9, 1)]
    assert report_data(_planted_run(tmp_path))["diagnosis"]["positions"] == [(0.0, 1), (0.5, 5), (1.0, 1)]


def _axis_ticks(dom: str, label: str) -> list[tuple[float, int]]:
    svg = re.search(rf'<svg[^>]*data-label="{label}".*?</svg>', dom, re.S)
    assert svg, f"no {label} axis"
    return [(float(d), int(n)) for d, n in re.findall(r'<g class="item" data-d="([^"]+)" data-count="(\d+)"',
                                                      svg.group(0))]


def test_chromium_shows_how_many_items_share_a_position(tmp_path):
    from benchfill.viewer.report import write_report

    (tmp_path / "run").mkdir()
    dom = _dump_dom(write_report(_planted_run(tmp_path / "run")).as_uri(), tmp_path)
    assert _axis_ticks(dom, "before") == [(0.0, 1), (0.5, 5), (1.0, 1)]
    five = re.search(r'data-d="0.5" data-count="5">(.*?)</g>', dom, re.S).group(1)
    assert '>5</text>' in five  # the count printed above the tick
    assert '<title>5 items at d = 0.500</title>' in five
    one = re.search(r'data-d="0" data-count="1">(.*?)</g>', dom, re.S).group(1)
    assert '</text>' not in one  # a single item: no count
    top = [float(re.search(r'y1="79" y2="([\d.]+)"', g).group(1)) for g in (five, one)]
    assert top[0] < top[1]  # the tick of five items reaches higher


def test_chromium_draws_a_scale_under_each_placement_and_the_gap_ends(known_run, tmp_path):
    dom = _dump_dom((known_run / "report.html").as_uri(), tmp_path)
    data = report_data(known_run)
    before, after = _axis_ticks(dom, "before"), _axis_ticks(dom, "after")
    assert sum(n for _, n in before) == len(data["diagnosis"]["d"]) == 40
    chosen = [t for t in data["methods"]["benchfill"] if t["chosen"] is not None]
    assert sum(n for _, n in after) == 40 + len(chosen)  # the added items counted in
    bars = re.findall(r'<svg[^>]*class="placement".*?</svg>', dom, re.S)
    assert bars
    g = data["methods"]["benchfill"][0]
    for bar in bars:
        ticks = [float(t) for t in re.findall(r'class="tick" data-tick="([^"]+)"', bar)]
        assert len(ticks) >= 3 and ticks == sorted(ticks), bar[:300]
        steps = np.diff(ticks)
        assert np.allclose(steps, steps[0])  # evenly spaced round values
    chosen_card = re.search(rf'id="cand-benchfill-{re.escape(g["chosen"])}".*?<svg[^>]*class="placement".*?</svg>',
                            dom, re.S).group(0)
    ends = re.findall(r'class="gap-end"[^>]*>([^<]+)</text>', chosen_card)
    assert ends == [f"{g['lo']:.3f}", f"{g['hi']:.3f}"]
