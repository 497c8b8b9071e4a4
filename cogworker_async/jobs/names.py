"""Queue names, pure: which strings may name a queue.

A leaf module: the job, the settings and the stores all check names, and none of them
should have to import another to do it.
"""

from __future__ import annotations

import re
from typing import Final

# Queue names end up inside key names; braces would break a Cluster hash tag and
# whitespace or control characters make keys that no admin can type.
# Matched whole (fullmatch): "$" alone also matches before a trailing newline.
_QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,128}", re.ASCII)


def check_queue_name(name: object) -> str:
    """Return ``name`` if it can be a queue name, else raise a clear error."""
    if not isinstance(name, str):
        raise TypeError(f"a queue name must be a str, not {type(name).__name__}")
    if not _QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid queue name {name!r}: use 1-128 letters, digits, '_', '-', '.', ':'"
        )
    return name
