"""What this machine has: the memory the gate may plan for, read once at gate start.

The smaller of the kernel's `MemAvailable` (free memory plus what it can reclaim) and the
cgroup's own limit (`memory.max` minus what the group already uses), so a gate inside a
container or a CI job's slice plans for its slice, not the host's.
"""

from __future__ import annotations

from pathlib import Path

KB_PER_MB = 1024


def _meminfo_mb(name: str, path: Path = Path("/proc/meminfo")) -> float | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            if key == name:
                return int(value.split()[0]) / KB_PER_MB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room_mb(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """cgroup v2: `memory.max` less `memory.current` of this process's group (None: none)."""
    try:
        relative = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        group = root / relative.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int((group / "memory.current").read_text().strip())
        return max(0, int(limit) - used) / (KB_PER_MB * 1024)
    except (OSError, ValueError, IndexError):
        return None


def memory_mb() -> float | None:
    """The memory available to the gate's shards here (MB), or None when it cannot be read."""
    known = [mb for mb in (_meminfo_mb("MemAvailable"), _cgroup_room_mb()) if mb is not None]
    return round(min(known), 1) if known else None
