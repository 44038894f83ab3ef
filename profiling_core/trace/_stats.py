"""What the loader read and what it left out (``LoadStats``): the one record every loading pass writes into."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoadStats:
    """What the loader read and what it left out (and why)."""

    events: int = 0
    slices: int = 0
    flows: int = 0
    counters: int = 0  # rows of the counter table (one per numeric field of a "C" event)
    spill_tracks: int = 0
    # reason -> events, in the order first met (C_arg_not_a_number: fields of counter events, not events)
    skipped: dict[str, int] = field(default_factory=dict)
    # text that was not valid Unicode, read with U+FFFD in its place: reason -> replacements ("invalid_utf8": byte
    # sequences that are not UTF-8, "lone_surrogate": \uD800-\uDFFF escapes that are not half of a pair)
    repaired: dict[str, int] = field(default_factory=dict)
    # the GPUs the trace says it ran on (Kineto's top-level deviceProperties): [{"id", "name", "compute_capability"}]
    devices: list[dict] = field(default_factory=list)
    # the torch.profiler options the trace says it was recorded with (``_decode.RECORDING_OPTIONS`` that were on)
    recorded_with: list[str] = field(default_factory=list)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def repair(self, reason: str, n: int = 1) -> None:
        self.repaired[reason] = self.repaired.get(reason, 0) + n

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())
