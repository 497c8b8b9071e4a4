"""The keys table (docs/reference/keys.md) is the code's key layout: every key name the
code builds is a row of the table, and every row is a key the code builds. Likewise the
page's payload fields are ``Payload``'s.

The code's names are read from the code, not listed here: every public member of
``Keys`` (cogworker_async/redis/keys.py, the only place a key is formatted) called with
placeholders, the parts of the limiters' keys from the calls of ``Keys.limiter`` in the
package's source, and the suffixes the Lua scripts append to a slot's prefix. A new key
fails this test until the table has its row (or, for a name that is not a stored key,
until ``NOT_KEYS`` says why). Placeholders are compared by position, not by spelling:
``<q>`` and ``<queue>`` are the same.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from cogworker_async.jobs.wire import Payload
from cogworker_async.redis.keys import Keys

ROOT: Final = Path(__file__).resolve().parent.parent
PAGE: Final = ROOT / "docs" / "reference" / "keys.md"
PACKAGE: Final = ROOT / "cogworker_async"
LUA: Final = PACKAGE / "redis" / "lua"
NAMESPACE: Final = "cogworker"
"""The namespace the page is written for."""

PLACEHOLDERS: Final = {"flusher": "<identity>:<run>"}
"""Arguments whose value has a shape of its own (a flusher is a process's identity and
one run's random part); any other argument stands for one ``<name>``."""

NOT_KEYS: Final = {
    "namespace": "the field itself",
    "queue_name_of": "reads a queue's name out of a key",
    "identity_of_list": "reads a process's identity out of a key",
    "queue_prefix": "a prefix: the keys made from it are rows",
    "orphanings_prefix": "a prefix of orphanings",
    "record_prefix": "a prefix of record",
    "cancels_prefix": "a prefix of cancels",
    "in_progress_pattern": "a SCAN pattern of in_progress",
    "wake_channel": "a pub/sub channel, not a key",
    "finished_channel": "a pub/sub channel, not a key",
    "declared_dead": "in the namespace's slot: handed to the beat script, never written",
    "no_list": "in the namespace's slot: handed to forget.lua, never written",
    "batch_keys": "a batch's keys as a list: batch and batch_set are rows",
    "dep_keys": "a waiting job's keys as a list: dep, dep_pending, record, waiting, "
                "arming are rows",
}
"""Public members of ``Keys`` that name no stored key, and why. The channels and the two
names never written are still named on the page (checked below), outside the tables."""

_BACKTICKED: Final = re.compile(r"`([^`]+)`")
_PLACEHOLDER: Final = re.compile(r"<[^<>]+>")
_LUA_SUFFIX: Final = re.compile(r'\.\.\s*"([A-Za-z_:]+)"(\s*\.\.)?')
"""A key suffix appended to a slot's prefix in a script: ``slot .. "paused"``, or
``slot .. "in_progress:" .. identity`` (a part follows)."""


def shape(key: str) -> str:
    """``key`` with each placeholder as ``<>``: the layout, not the spelling."""
    return _PLACEHOLDER.sub("<>", key)


def _placeholder(parameter: str) -> str:
    return PLACEHOLDERS.get(parameter, f"<{parameter}>")


def members_of_keys() -> list[str]:
    return sorted(name for name in dir(Keys) if not name.startswith("_"))


def keys_members_built(keys: Keys) -> dict[str, str]:
    """Each public member of ``Keys`` that names a key -> the key, with placeholders."""
    built = {}
    for name in members_of_keys():
        if name in NOT_KEYS or name == "limiter":
            continue
        member = getattr(Keys, name)
        if isinstance(member, property):
            built[name] = getattr(keys, name)
        else:
            parameters = list(inspect.signature(member).parameters)[1:]
            built[name] = getattr(keys, name)(*map(_placeholder, parameters))
    return built


def _literal_parts(node: ast.expr) -> Iterator[str]:
    """The strings a limiter's ``part`` argument can be: a literal, an f-string (each
    field a placeholder), or either branch of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(value.value if isinstance(value, ast.Constant) else "<field>"
                      for value in node.values)
    elif isinstance(node, ast.IfExp):
        yield from _literal_parts(node.body)
        yield from _literal_parts(node.orelse)


def limiter_parts() -> set[str]:
    """Every ``part`` the package passes to ``Keys.limiter`` as a literal (a part held in
    a variable is one of these literals somewhere else)."""
    parts = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "limiter" and len(node.args) == 2
                    and ast.unparse(node.func.value).endswith("keys")):
                parts.update(_literal_parts(node.args[1]))
    return parts


def code_keys() -> set[str]:
    """The shape of every key the code builds."""
    keys = Keys(NAMESPACE)
    built = {shape(key) for key in keys_members_built(keys).values()}
    built |= {shape(keys.limiter("<name>", part)) for part in limiter_parts()}
    return built


def lua_suffixes() -> set[str]:
    """The shape of each key suffix a script appends to a slot's prefix itself."""
    suffixes = set()
    for script in LUA.glob("*.lua"):
        for match in _LUA_SUFFIX.finditer(script.read_text("utf-8")):
            suffix, continued = match.groups()
            suffixes.add(suffix + ("<>" if continued and suffix.endswith(":") else ""))
    return suffixes


def _page() -> str:
    return PAGE.read_text("utf-8")


def table_keys() -> set[str]:
    """The shape of every key in the first column of the page's key tables (a table
    whose header's first cell is ``key``; a cell may name several, each in backticks)."""
    found: set[str] = set()
    in_keys_table = False
    for line in _page().splitlines():
        if not line.startswith("|"):
            in_keys_table = False
            continue
        first = line.split("|")[1].strip()
        if first == "key":
            in_keys_table = True
        elif in_keys_table and not set(first) <= set("-: "):
            found.update(shape(key) for key in _BACKTICKED.findall(first))
    return found


def payload_fields_on_the_page() -> set[str]:
    """The fields in the first column of the page's payload table (``fields`` header)."""
    found: set[str] = set()
    in_table = False
    for line in _page().splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        first = line.split("|")[1].strip()
        if first == "fields":
            in_table = True
        elif in_table:
            found.update(_BACKTICKED.findall(first))
    return found


def test_the_scan_finds_the_keys_it_must() -> None:
    """The readers work: known keys of either slot, a limiter's part from an f-string,
    and a suffix a script appends, are all found."""
    assert "cogworker:{<>}:queue" in code_keys()
    assert "cogworker:{cogworker}:limit:<>:over:<>" in code_keys()
    assert "cogworker:{cogworker}:stats:flushed:<>:<>" in code_keys()
    assert {"paused", "in_progress:<>"} <= lua_suffixes()
    assert "cogworker:{<>}:queue" in table_keys()
    assert len(table_keys()) > 30


def test_every_key_the_code_builds_is_in_the_table() -> None:
    missing = code_keys() - table_keys()
    assert not missing, f"keys the code builds that {PAGE.name}'s tables lack: {sorted(missing)}"


def test_every_row_of_the_table_is_a_key_the_code_builds() -> None:
    extra = table_keys() - code_keys()
    assert not extra, f"rows of {PAGE.name} that the code never builds: {sorted(extra)}"


def test_every_suffix_a_script_appends_is_in_the_table() -> None:
    """fetch.lua makes the pause flag's and the in-progress lists' names from a queue's
    prefix, _record.lua the live records' hash: those keys are rows too."""
    rows = table_keys()
    for suffix in lua_suffixes():
        assert any(row.endswith("}:" + shape(suffix)) for row in rows), \
            f"a script appends {suffix!r} to a slot's prefix: no row of {PAGE.name} ends so"


def test_every_member_of_keys_is_a_key_or_says_why_not() -> None:
    """A new member of ``Keys`` is a key (then it must be a row) or is listed in
    ``NOT_KEYS``; a name listed there that ``Keys`` no longer has is stale."""
    members = set(members_of_keys())
    assert not set(NOT_KEYS) - members, f"NOT_KEYS names what Keys lacks: {set(NOT_KEYS) - members}"


def test_the_names_that_are_no_rows_are_still_on_the_page() -> None:
    """The channels and the names never written are named in the page's prose."""
    keys, page = Keys(NAMESPACE), _page()
    named = {keys.wake_channel, keys.finished_channel("<jid>"), keys.declared_dead,
             keys.no_list("<identity>")}
    on_page = {shape(token) for token in _BACKTICKED.findall(page)}
    assert {shape(name) for name in named} <= on_page
    assert not {shape(name) for name in named} & table_keys()


def test_the_payload_fields_are_the_payloads() -> None:
    assert payload_fields_on_the_page() == set(Payload.__annotations__)
