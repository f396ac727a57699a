"""What the benchmarks read of running processes from /proc (Linux): a process's descendants, its
resident memory and CPU time. One place for the soak, service, tables, chaos and engine benchmarks."""

from __future__ import annotations

import os
from pathlib import Path


def family(root: int) -> set[int]:
    """``root`` and every process descended from it (scanning /proc for parent ids)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    members, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in members and pid not in members:
                members.add(pid)
                grew = True
    return members


def resident_mb(pid: int | str = "self") -> float | None:
    """Resident memory (VmRSS) of ``pid`` in MB, or None when it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 once gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
