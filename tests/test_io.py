"""benchfill.io: one documented file mode for everything a run writes (0666 & ~umask, as SQLite and open() give),
and targets that are not regular files (``-``, /dev/stdout, a FIFO) written in place, never replaced."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from benchfill.io import _direct_target, atomic_write_json, atomic_write_text, file_mode


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)

    def set_(mask: int) -> None:
        os.umask(mask)

    yield set_
    os.umask(old)


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_written_files_get_0666_minus_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    assert file_mode() == mode
    path = atomic_write_text(tmp_path / "a.txt", "x\n")
    assert _mode(path) == mode
    path = atomic_write_text(tmp_path / "a.txt", "y\n")  # an overwrite too
    assert _mode(path) == mode and path.read_text() == "y\n"


def test_every_file_of_a_run_has_the_same_mode_sqlite_included(tmp_path, umask):
    from benchfill.models.evaluate import evaluate

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}) + "\n"
                             for i in range(4)))
    cfg = tmp_path / "sim.toml"
    cfg.write_text('[[panel]]\nmodel = "sim/a"\nrollouts = 2\n[sim.abilities]\na = 1.0\n')
    umask(0o027)
    out = tmp_path / "run"
    evaluate(items, cfg, out)
    files = sorted(p for p in out.iterdir() if p.is_file())
    assert {p.name for p in files} >= {"responses.csv", "summary.json", "skipped.csv", "calls.sqlite"}
    assert {p.name: _mode(p) for p in files} == {p.name: 0o640 for p in files}


def test_dash_is_stdout_and_dev_stdout_is_written_not_replaced():
    code = ("from pathlib import Path\nfrom benchfill.io import _direct_target, atomic_write_text, atomic_write_json\n"
            "assert _direct_target(Path('/dev/stdout')) and _direct_target(Path('-'))\n"
            "atomic_write_text('/dev/stdout', 'via-dev-stdout\\n')\natomic_write_json('-', {'via': 'dash'})\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.splitlines()[0] == "via-dev-stdout"
    assert json.loads(res.stdout.split("\n", 1)[1]) == {"via": "dash"}
    assert os.path.islink("/dev/stdout") or stat.S_ISCHR(os.stat("/dev/stdout", follow_symlinks=False).st_mode)


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not a regular file renamed over it
    assert not _direct_target(tmp_path / "new.json")


def test_a_symlink_is_followed_and_kept(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(real.read_text()) == {"a": 1}
