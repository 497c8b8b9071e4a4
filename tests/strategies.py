"""What the outside world can hand the package: JSON-like values, stored bytes, jobs.

Stored bytes come from anywhere (another client, a hand-typed LPUSH, a bug, a newer or
older version), so they cover what JSON can say and what it cannot: huge integers,
NaN, lone surrogates (JSON's ``"\\ud800"`` escape reads back as one), nesting to past
the parser's recursion limit, bytes that are not UTF-8, and plain binary junk.
"""

from __future__ import annotations

import json
import string
from typing import Any, Final

from hypothesis import strategies as st

BIG: Final = 10**400
"""Past every machine integer and every float; JSON carries it digit for digit."""
MAX_INT_DIGITS: Final = 4300
"""Python reads and writes ints of at most this many digits as text (sys.int_info)."""
DEEP: Final = 3000
"""Deeper than Python's JSON reader goes (it raises RecursionError near 1,000)."""
LONE_SURROGATES: Final = ("\ud800", "\udfff", "a\udc80b")

SURROGATE: Final = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
PLAIN_TEXT: Final = st.text(max_size=12)
"""Any text without surrogates (Hypothesis' default alphabet leaves them out)."""
ANY_TEXT: Final = st.text(st.one_of(st.characters(), SURROGATE), max_size=12)
"""Any text, lone surrogates included."""
URL_TEXT: Final = st.text(st.characters(codec="utf-8"), max_size=30)
"""Text that can travel in a URL (httpx percent-encodes it as UTF-8)."""


def _power_of_ten(digits: int, negative: bool, offset: int) -> int:
    return (-1 if negative else 1) * int(10**digits) + offset


# Built from small numbers: a strategy holding 10**400 itself would print 400 digits in
# every repr of every strategy built on it.
BIG_INTS: Final = st.one_of(
    st.integers(),
    st.integers(-(2**65), 2**65),  # around the 64-bit edges
    st.builds(_power_of_ten, st.integers(0, 400), st.booleans(), st.integers(-2, 2)),
)


def scalars(text: st.SearchStrategy[str], *, nan: bool) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), BIG_INTS,
                     st.floats(allow_nan=nan, allow_infinity=nan), text)


def json_values(text: st.SearchStrategy[str] = PLAIN_TEXT, *, nan: bool = False,
                leaves: int = 20) -> st.SearchStrategy[Any]:
    """Nested dicts (str keys) and lists of scalars: what ``json.loads`` can return."""
    return st.recursive(
        scalars(text, nan=nan),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(text, inner, max_size=4)),
        max_leaves=leaves,
    )


def nested(depth: int, kind: str) -> Any:
    """A value nested ``depth`` deep: lists in lists, or {"a": {"a": ...}}."""
    value: Any = []
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def deep_text(depth: int, kind: str) -> str:
    """The JSON text of ``nested(depth, kind)``, written without recursion."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "[]" + "}" * depth


OPTIONAL_FIELDS: Final = (
    "queue", "retry", "created_at", "enqueued_at", "failed_at", "retried_at", "retry_count",
    "error_class", "error_message", "error_backtrace", "raw_payload_preview",
    "unique_digest", "unique_ttl")
"""Fields a worker writes besides the four a job needs."""
UNKNOWN_NAME: Final = st.just("no.such.job")


def job_payloads(values: st.SearchStrategy[Any], name: st.SearchStrategy[str], *,
                 well_formed: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Job-shaped objects: the fields a worker writes, each holding anything (or, when
    ``well_formed``, the fields a job needs with their types), plus optional fields."""
    jid = st.text(string.hexdigits, min_size=1, max_size=24)
    args = st.lists(values, max_size=4)
    kwargs = st.dictionaries(PLAIN_TEXT, values, max_size=4)
    if well_formed:
        fields = {"jid": jid, "class": name, "args": args, "kwargs": kwargs}
    else:
        fields = {"jid": st.one_of(jid, values), "class": st.one_of(name, values),
                  "args": st.one_of(args, values), "kwargs": st.one_of(kwargs, values)}
    optional = dict.fromkeys(OPTIONAL_FIELDS, values)
    return st.fixed_dictionaries(fields, optional=optional)


def encoded(value: Any, ascii_only: bool) -> bytes:
    """``value`` as stored JSON bytes. With ``ascii_only`` a lone surrogate is written as
    its escape (valid JSON); otherwise as raw UTF-8 bytes Python's codec refuses."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")


def encodings(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return st.builds(encoded, values, st.booleans())


@st.composite
def deep_bytes(draw: st.DrawFn) -> bytes:
    depth = draw(st.sampled_from([500, 990, 1000, DEEP, 100_000]))
    body = deep_text(depth, draw(st.sampled_from(["list", "dict"])))
    wrapped = draw(st.booleans())
    return (f'{{"jid":"deep","class":"x","args":[{body}]}}' if wrapped else body).encode()


@st.composite
def mangled(draw: st.DrawFn, values: st.SearchStrategy[bytes]) -> bytes:
    """Stored bytes cut short, or with bytes flipped: a torn or corrupted write."""
    raw = draw(values)
    if not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    if draw(st.booleans()):
        return raw[:at]
    return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]


def stored_bytes(name: st.SearchStrategy[str] = UNKNOWN_NAME,
                 text: st.SearchStrategy[str] = ANY_TEXT) -> st.SearchStrategy[bytes]:
    """Anything a queue, a set or a list of jobs may hold."""
    values = json_values(text, nan=True, leaves=12)
    jobs = encodings(job_payloads(values, name))
    return st.one_of(
        st.binary(max_size=64),
        encodings(values),
        jobs,
        encodings(job_payloads(values, name, well_formed=True)),
        mangled(jobs),
        deep_bytes(),
        st.sampled_from([b"", b"null", b"[]", b"{}", b'"\\ud800"', b"\xed\xa0\x80",
                         b"\xff\xfe{\x00}\x00", b"1" * (MAX_INT_DIGITS + 1)]),
    )
