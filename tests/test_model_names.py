"""The model and the code held together (docs/model.md): each Lua script's contract header
names the model step it implements and the properties it upholds, or says why it has
none; each step of the model is a script. Pure: no spin needed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "cogworker_async" / "redis" / "lua"
MODEL = ROOT / "model"

STEP = re.compile(r"^-- Model: (\w+) \(model/(\w+)\.pml\); upholds: ([\w, ]+)$", re.M)
NONE = re.compile(r"^-- Model: none — \S.*$", re.M)


def model_steps() -> dict[str, set[str]]:
    """pml file -> the inline steps it defines (helpers, named h_*, are no script)."""
    return {path.stem: {name for name in re.findall(r"^inline (\w+)\(", path.read_text(), re.M)
                        if not name.startswith("h_")}
            for path in MODEL.glob("*.pml")}


def model_properties() -> set[str]:
    text = "\n".join(path.read_text() for path in MODEL.glob("*.pml"))
    return set(re.findall(r"^ltl (\w+)", text, re.M)) | set(re.findall(r"CHECK_(\w+)", text))


def test_every_script_names_its_model_step_or_why_none() -> None:
    steps, properties = model_steps(), model_properties()
    problems = []
    for script in sorted(LUA.glob("*.lua")):
        text = script.read_text()
        found = STEP.findall(text)
        if not found and not NONE.search(text):
            problems.append(f"{script.name}: no '-- Model:' line in its header")
            continue
        for step, pml, upholds in found:
            if step != script.stem:
                problems.append(f"{script.name}: names step {step}, not its own name")
            if step not in steps.get(pml, set()):
                problems.append(f"{script.name}: model/{pml}.pml has no step {step}")
            for prop in (p.strip() for p in upholds.split(",")):
                if prop not in properties:
                    problems.append(f"{script.name}: the model has no property {prop}")
    assert not problems, "\n".join(problems)


def test_every_model_step_is_a_script() -> None:
    named = {m[0] for script in LUA.glob("*.lua") for m in STEP.findall(script.read_text())}
    orphans = sorted(f"model/{pml}.pml: {step}" for pml, steps in model_steps().items()
                     for step in steps if step not in named)
    assert not orphans, f"model steps no script names: {orphans}"
