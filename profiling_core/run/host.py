"""Facts of the machine a run is on, read without torch: the processor's model name."""
from __future__ import annotations

import platform


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``'s ``model name``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
