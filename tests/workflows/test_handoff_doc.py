"""The workflows guide says how long a hand-off takes (issue 45 item 8, issue 43 item 3):
milliseconds, the relay woken by the end's own script; and, for a wake-up missed, the
notes relay's next pass, every ``poll_interval`` seconds jittered. The numbers it gives
are the code's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cogworker_async.settings import Settings
from cogworker_async.worker.notes_relay import UNSERVED_EVERY

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "workflows.md"
JITTER = (0.5, 1.5)
"""``NotesRelay.run``'s sleep between passes: ``interval * uniform(0.5, 1.5)``."""


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_the_workflows_guide_says_a_hand_off_is_woken_and_the_poll_makes_up_a_miss() -> None:
    section = _section(GUIDE.read_text(), "## How long a hand-off takes")
    [field] = [f for f in dataclasses.fields(Settings) if f.name == "poll_interval"]
    default = float(field.default)  # type: ignore[arg-type]
    low, high = default * JITTER[0], default * JITTER[1]
    assert "notes relay" in section
    assert "`poll_interval`" in section
    assert f"the default {default:g}" in section or f"the default {default}" in section
    assert f"{low:g}–{high:g} s" in section
    for hand_off in ("dependent", "chain", "callbacks"):
        assert hand_off in section
    assert "A few milliseconds" in section
    assert "benchmarks/handoff.py" in section
    assert (GUIDE.parents[2] / "benchmarks" / "handoff.py").is_file()
    assert f"every\n{UNSERVED_EVERY:g} s" in section or f"every {UNSERVED_EVERY:g} s" in section
