"""The machine's CPU used by processes outside a benchmark while it measures.

A benchmark on a shared machine is only as good as the quiet around it. :class:`ForeignLoad`
reads the whole machine's busy CPU time (``/proc/stat``) and the benchmark's own process tree's
(this process, the children it waited for, and every live descendant: servers, wrk) at the start
and the end of the measured runs; what the machine spent beyond the tree is foreign, printed as
a share of all CPUs over that time (Linux only; elsewhere it says it cannot tell).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float:
    """Every CPU's non-idle time since boot, in seconds."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / TICK


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[
        text.rindex(")") + 2 :
    ].split()  # fields from the state on (the name may hold spaces)


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds of ``root`` (this process) with the children it reaped, and of every live
    descendant with theirs."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
            stats[int(entry.name)] = fields
    tree, grown = {root}, True
    while grown:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        grown = bool(found)
        tree |= found
    # utime, stime, cutime, cstime are fields 14-17 of the stat line: 11-14 from the state on.
    return sum(sum(int(n) for n in stats[pid][11:15]) for pid in tree if pid in stats) / TICK


class ForeignLoad:
    def __init__(self) -> None:
        self.ok = Path("/proc/stat").exists()
        self.cpus = os.cpu_count() or 1
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        if not self.ok:
            return (time.monotonic(), 0.0, 0.0)
        return (time.monotonic(), machine_busy_s(), tree_cpu_s())

    def summary(self) -> str:
        """Foreign CPU as a share of the machine since construction, with the load averages."""
        if not self.ok:
            return "foreign load: cannot tell (no /proc/stat)"
        wall, busy, own = (b - a for a, b in zip(self._start, self._sample(), strict=True))
        foreign = max(0.0, busy - own) / (wall * self.cpus) if wall > 0 else 0.0
        loads = ", ".join(f"{n:.2f}" for n in os.getloadavg())
        return (
            f"foreign load: {foreign:.1%} of {self.cpus} CPUs over {wall:.0f} s "
            f"(machine busy {busy / (wall * self.cpus):.1%}, this bench's processes "
            f"{own / (wall * self.cpus):.1%}; load averages now {loads})"
        )
