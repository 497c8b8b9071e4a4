"""Model-check the protocol (model/protocol.pml) with SPIN: every property on the fixed
model, every mutant and every pre-fix variant (docs/model.md).

For each run: ``spin -a`` with the run's -D flags, ``gcc`` builds the verifier, ``./pan``
searches (safety: assertions or a ``[]`` claim; liveness: ``-a -f``, acceptance cycles
under weak fairness). Prints one table row per run and exits 1 when a property fails on
the fixed model, a mutant or a pre-fix variant passes, or a search is cut short (depth
or memory). The counterexamples of the pre-fix variants (and of any open finding) are
written, trimmed, to model/traces/<name>.txt. Standard library only.

    python model/check.py            # everything (make model)
    python model/check.py --only dep  # the runs whose name contains "dep"
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = HERE / "protocol.pml"
TRACES = HERE / "traces"
PAN_FLAGS = ["-m1000000", "-w24"]


@dataclass(frozen=True)
class Run:
    name: str
    scenario: str
    prop: str               # an ltl name, or an assertion's CHECK_ name
    expect: str             # "pass" (fixed model), "fail" (a mutant / pre-fix), "open"
    flags: tuple[str, ...] = ()
    trace: bool = False     # keep the counterexample under traces/

    @property
    def liveness(self) -> bool:
        return self.prop in LIVENESS


LTL = {"no_job_lost", "jobs_end", "batch_ends", "waits_end"}
LIVENESS = {"jobs_end", "batch_ends", "waits_end"}

FIXED = [
    Run("jobs/no_job_lost", "SCEN_JOBS", "no_job_lost", "pass"),
    Run("jobs/no_rerun", "SCEN_JOBS", "no_rerun", "pass"),
    Run("jobs/cancelled_never_starts", "SCEN_JOBS", "cancelled_never_starts", "pass"),
    Run("jobs/jobs_end", "SCEN_JOBS", "jobs_end", "pass", ("-DLIGHT",)),
    Run("batch/no_job_lost", "SCEN_BATCH", "no_job_lost", "pass"),
    Run("batch/callback_once", "SCEN_BATCH", "callback_once", "pass"),
    Run("batch/callback_after_members", "SCEN_BATCH", "callback_after_members", "pass"),
    Run("batch/batch_sealed_unheld", "SCEN_BATCH", "batch_sealed_unheld", "pass"),
    Run("batch/batch_ends", "SCEN_BATCH", "batch_ends", "pass"),
    Run("unserved/callback_once", "SCEN_UNSERVED", "callback_once", "pass"),
    Run("unserved/batch_ends", "SCEN_UNSERVED", "batch_ends", "pass"),
    Run("deps/no_job_lost", "SCEN_DEPS", "no_job_lost", "pass"),
    Run("deps/dependent_after_parents", "SCEN_DEPS", "dependent_after_parents", "pass"),
    Run("deps/cancelled_never_starts", "SCEN_DEPS", "cancelled_never_starts", "pass"),
    Run("deps/waits_end", "SCEN_DEPS", "waits_end", "pass"),
    Run("groups/group_limit", "SCEN_GROUPS", "group_limit", "pass"),
    Run("groups/no_job_lost", "SCEN_GROUPS", "no_job_lost", "pass"),
    Run("groups/jobs_end", "SCEN_GROUPS", "jobs_end", "pass"),
    # A co-tenant's key at a process's marker name, without a TTL: recovery still comes.
    Run("cotenant/jobs_end", "SCEN_JOBS", "jobs_end", "pass", ("-DLIGHT", "-DCOTENANT")),
]

# A Redis whose failover loses the last acknowledged write (docs/reliability.md,
# "Replication is asynchronous"): without durability an enqueue is lost and an ack undone
# (the job runs again), expected; with durability_replicas = every replica, both hold.
LOSSY = [
    Run("lossy/no_job_lost", "SCEN_JOBS", "no_job_lost", "fail", ("-DLIGHT", "-DLOSSY")),
    Run("lossy/no_rerun", "SCEN_JOBS", "no_rerun", "fail", ("-DLIGHT", "-DLOSSY")),
    Run("lossy_durable/no_job_lost", "SCEN_JOBS", "no_job_lost", "pass",
        ("-DLIGHT", "-DLOSSY", "-DDURABLE")),
    Run("lossy_durable/no_rerun", "SCEN_JOBS", "no_rerun", "pass",
        ("-DLIGHT", "-DLOSSY", "-DDURABLE")),
]

# Issue 40's defects, the code as it was: each must violate its liveness property.
PREFIX = [
    Run(f"prefix/{name}", scenario, prop, "fail", (f"-DPREFIX_{name.upper()}",), True)
    for name, scenario, prop in [
        ("holder", "SCEN_BATCH", "batch_ends"),      # defect 1
        ("sweep", "SCEN_DEPS", "waits_end"),         # defect 4
        ("unserved", "SCEN_UNSERVED", "batch_ends"),  # defect 5
        ("add_window", "SCEN_BATCH", "batch_ends"),   # found by the model, then fixed
    ]
] + [  # found by the co-tenant fuzz (a marker without a TTL kept a dead process alive)
    Run("prefix/marker_garbage", "SCEN_JOBS", "jobs_end", "fail",
        ("-DLIGHT", "-DCOTENANT", "-DPREFIX_MARKER_GARBAGE"), True),
]

# Findings of the model still open in the code (docs/model.md): expected to fail.
OPEN: list[Run] = []

# Deliberate weakenings: each must violate the property named.
MUTANTS = [
    Run(f"mutant/{name}", scenario, prop, "fail", (f"-DMUTANT_{name.upper()}",))
    for name, scenario, prop in [
        ("ack_source_first", "SCEN_JOBS", "no_job_lost"),
        ("recovery_skips_fence", "SCEN_JOBS", "no_rerun"),
        ("give_back_removes_first", "SCEN_JOBS", "no_job_lost"),
        ("promote_pops_first", "SCEN_JOBS", "no_job_lost"),
        ("file_failure_removes_first", "SCEN_JOBS", "no_job_lost"),
        ("fetch_ignores_cancel", "SCEN_JOBS", "cancelled_never_starts"),
        ("note_outside_settle", "SCEN_BATCH", "batch_ends"),
        ("seal_one_holder", "SCEN_BATCH", "batch_sealed_unheld"),
        ("relay_drops_first", "SCEN_BATCH", "batch_ends"),
        ("callback_no_refusal", "SCEN_BATCH", "callback_once"),
        ("repair_while_held", "SCEN_BATCH", "callback_after_members"),
        ("dep_apply_early", "SCEN_DEPS", "dependent_after_parents"),
        ("cancel_skips_waiting", "SCEN_DEPS", "cancelled_never_starts"),
        ("group_slot_freed_before_settle", "SCEN_GROUPS", "group_limit"),
    ]
]

RUNS = FIXED + LOSSY + PREFIX + OPEN + MUTANTS


@dataclass
class Outcome:
    run: Run
    states: str
    violated: bool
    complete: bool
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        if self.run.expect == "pass":
            return not self.violated and self.complete
        return self.violated  # a mutant, a pre-fix variant, a lossy Redis, the open finding

    @property
    def result(self) -> str:
        seen = "VIOLATED" if self.violated else ("holds" if self.complete else "INCOMPLETE")
        if self.run.expect == "pass":
            return seen if self.ok else f"{seen} (FAIL)"
        if self.run.expect == "open":
            return f"{seen} (open finding)" if self.ok else f"{seen} (fixed? update the model)"
        return f"{seen} (expected)" if self.ok else f"{seen} (FAIL: must be violated)"


def check(run: Run) -> Outcome:
    started = time.monotonic()
    try:
        return _check(run, started)
    except subprocess.CalledProcessError as exc:
        return Outcome(run, "?", False, False, time.monotonic() - started,
                       f"{' '.join(exc.cmd)}: {exc.stderr or exc.stdout}"[-600:])


def _check(run: Run, started: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="cogmodel-") as tmp:
        work = Path(tmp)
        shutil.copy(MODEL, work / MODEL.name)
        defines = [f"-D{run.scenario}", *run.flags]
        ltl = run.prop in LTL
        if not ltl:
            defines.append(f"-DCHECK_{run.prop}")
        subprocess.run(["spin", "-a", *defines, MODEL.name], cwd=work, check=True,
                       capture_output=True, text=True)
        # -O2 pays for a full search; a counterexample is found in a few states, where
        # gcc's time is most of the run
        cflags = ["-O2" if run.expect == "pass" else "-O0", "-w", "-o", "pan", "pan.c"]
        if not ltl:
            cflags.insert(0, "-DNOCLAIM")
        subprocess.run(["gcc", *cflags], cwd=work, check=True, capture_output=True, text=True)
        pan = ["./pan", *PAN_FLAGS]
        if ltl:
            pan += ["-N", run.prop]
        if run.liveness:
            pan += ["-a", "-f"]
        out = subprocess.run(pan, cwd=work, capture_output=True, text=True).stdout
        errors = re.search(r"errors: (\d+)", out)
        stored = re.search(r"([\d.e+]+) states, stored", out)
        violated = bool(errors and int(errors.group(1)) > 0)
        if violated and not ltl and "assertion violated" not in out:
            violated = False  # some other error (an invalid end state): reported below
        complete = (errors is not None and "max search depth too small" not in out
                    and "out of memory" not in out.lower())
        detail = "" if errors else out[-400:]
        if run.trace and violated:
            write_trace(run, work, defines)
    return Outcome(run, stored.group(1) if stored else "?", violated, complete,
                   time.monotonic() - started, detail)


# kept: the writes to Redis' state (and the ghosts); left out: guards, loop counters and a
# worker's locals
SCRATCH = re.compile(r"\t\[(?!.* = )|\t\[\(?(t|u|j|k|q|e|r|z|ok|cur|om|ost|nv) = ")


def write_trace(run: Run, work: Path, defines: list[str]) -> None:
    """The counterexample, replayed (spin -t -p), the steps that change Redis' state."""
    replay = subprocess.run(["spin", "-t", "-p", "-k", f"{MODEL.name}.trail", *defines,
                             MODEL.name],
                            cwd=work, capture_output=True, text=True).stdout
    lines = [line.rstrip() for line in replay.splitlines()
             if (re.match(r"^\s*\d+:\s+proc\s+\d", line) and not SCRATCH.search(line))
             or "CYCLE" in line or "violated" in line]
    name = run.name.split("/", 1)[1]
    TRACES.mkdir(exist_ok=True)
    header = (f"# {run.name}: property {run.prop} violated\n"
              f"# spin -a {' '.join(defines)} model/protocol.pml; gcc -o pan pan.c; "
              f"./pan {' '.join(PAN_FLAGS)}{' -a -f' if run.liveness else ''}"
              f"{' -N ' + run.prop if run.prop in LTL else ''}; spin -t -p ...\n"
              f"# steps that change state (loop counters and skips left out); a liveness\n"
              f"# counterexample is a prefix, then a cycle repeated forever\n")
    (TRACES / f"{name}.txt").write_text(header + "\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the runs whose name has this")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args()
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        print(f"model: {', '.join(missing)} not installed (apt-get install spin gcc)")
        return 2
    runs = [run for run in RUNS if args.only in run.name]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        outcomes = []
        for outcome in pool.map(check, runs):
            outcomes.append(outcome)
            print(f"  {outcome.run.name}: {outcome.result} ({outcome.seconds:.1f} s)", flush=True)
    width = max(len(o.run.name) + len(o.run.prop) for o in outcomes) + 3
    print(f"{'run | property':<{width}} | {'states':>10} | {'result':<34} | seconds")
    print("-" * (width + 62))
    for o in outcomes:
        label = f"{o.run.name} | {o.run.prop}"
        print(f"{label:<{width}} | {o.states:>10} | {o.result:<34} | {o.seconds:7.1f}")
        if o.detail:
            print("   " + o.detail.replace("\n", "\n   "))
    bad = [o for o in outcomes if not o.ok]
    names = ", ".join(o.run.name for o in bad)
    print(f"\n{len(outcomes)} runs in {time.monotonic() - started:.0f} s; "
          f"{len(bad)} not as expected" + (f": {names}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
