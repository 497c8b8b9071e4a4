"""The Lua scripts: loaded once from ``lua/*.lua``, run by EVALSHA (reloaded on NOSCRIPT).

Each move of a job between Redis structures is one script; its contract (KEYS, ARGV,
reply, invariants) is the header of its file. Nothing outside this package runs Lua.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Final

SCRIPT_NAMES: Final = (
    "ack",
    "add_stats",
    "beat",
    "bury_orphan",
    "cancel",
    "close_record",
    "cron_claim",
    "due",
    "enqueue",
    "enqueue_unique",
    "extend_lock",
    "fetch",
    "file_failure",
    "file_unsettled",
    "forget",
    "give_back",
    "limit_bucket",
    "limit_concurrent",
    "limit_window",
    "move_member",
    "park_unsettled",
    "progress",
    "promote",
    "release_lock",
    "relist",
    "requeue",
    "schedule",
    "take_lock",
)


PRELUDES: Final = {"redis_now": "_clock", "trim_dead": "_dead", "wake": "_wake",
                   "jid_in": "_record", "mark_record": "_record", "cancel_pending": "_record",
                   "drop_cancelled": "_record"}
"""Shared helpers (function name -> ``lua/<file>.lua``), put before each script that
calls them: a script runs alone in Redis and can import nothing."""


def file_text(name: str) -> str:
    """``lua/<name>.lua`` as written (without the helpers ``source`` adds)."""
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, after the shared helpers it calls."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    text = file_text(name)
    files = dict.fromkeys(file for function, file in PRELUDES.items() if f"{function}(" in text)
    return "".join(file_text(file) for file in files) + text
