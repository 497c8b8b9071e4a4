"""Every script file loads (a syntax error fails here, not in a worker)."""

import re

import pytest

from cogworker_async.redis.scripts import PRELUDES, SCRIPT_NAMES, file_text, source
from cogworker_async.redis.store import Store


@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_script_loads_and_documents_its_contract(store: Store, name: str) -> None:
    sha = await store.client.script_load(source(name))
    assert len(sha) == 40
    header = file_text(name).splitlines()[0]
    assert header.startswith(f"-- {name}:"), "each script opens with its contract"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_script_gets_the_helpers_it_calls_once_and_no_others(name: str) -> None:
    # Each top-level function costs a closure at every call of the script: a helper it
    # never calls (directly or through another helper) must not be there.
    text, full = file_text(name), source(name)
    defined = re.findall(r"^local function (\w+)\(", full, re.MULTILINE)
    assert len(defined) == len(set(defined)), "a helper goes in once"
    for function in PRELUDES:
        if f"{function}(" in text:
            assert f"local function {function}(" in full, function
    helpers = [function for function in defined if function in PRELUDES]
    for function in helpers:  # each one is called by the script or by another helper
        callers = full.replace(f"local function {function}(", "")
        assert f"{function}(" in callers, f"{function} is in {name} but never called"
    if not any(f"{function}(" in text for function in PRELUDES):
        assert full == text
