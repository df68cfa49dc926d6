"""Peak memory of a process tree, polled from /proc: shared by the benchmark scripts (Linux only)."""

from __future__ import annotations

import os
import threading


class TreePeak:
    """Peak RSS and PSS (KiB) of a process and all its descendants, polled from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss_kb, self.pss_kb = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    @staticmethod
    def _children(pid: int) -> list[int]:
        kids: list[int] = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids += [int(x) for x in fh.read().split()]
        except OSError:
            pass
        return kids

    @staticmethod
    def _mem(pid: int) -> tuple[int, int]:
        rss = pss = 0
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss = int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss = int(line.split()[1])
        except OSError:
            pass
        return rss, pss

    def _poll(self) -> None:
        while not self._stop.is_set():
            pids, frontier = [], [self.pid]
            while frontier:
                p = frontier.pop()
                pids.append(p)
                frontier += self._children(p)
            mem = [self._mem(p) for p in pids]
            self.rss_kb = max(self.rss_kb, sum(m[0] for m in mem))
            self.pss_kb = max(self.pss_kb, sum(m[1] for m in mem))
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "TreePeak":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
