"""Chains: jobs that run one after another — ``jobs.chain(a.s(1), b.s(), c.s())``.

    jids = await jobs.chain(fetch.s(url), parse.s(), store.s(), pass_result=True).enqueue()

Each job after the first runs after the one before it succeeded (``options(after=)``,
``enqueue/after.py``): a failure stops the chain there (the jobs after it are cancelled, as
``on_parent_failure="cancel"`` does). With ``pass_result`` each job takes the return
value of the one before as its first argument, so every job but the last keeps its
result (``CHAIN_KEEP_RESULT``, unless its signature says how long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from cogworker_async.errors import UNTRACKED, ConfigurationError
from cogworker_async.jobs import dedup
from cogworker_async.jobs.signature import Signature, check

CHAIN_KEEP_RESULT: Final = 86400.0
"""Seconds a chained job's result is kept for the next one (with ``pass_result``), when
its signature keeps none: the relay reads it within a poll interval of the job's end;
a day covers a fleet that was down meanwhile."""


class Chain:
    """Signatures to enqueue as a chain (``App.chain``)."""

    def __init__(self, signatures: Sequence[Signature], *, pass_result: bool = False,
                 tracked: bool = True) -> None:
        if not signatures:
            raise ValueError("a chain needs at least one signature")
        if not isinstance(pass_result, bool):
            raise TypeError(f"pass_result must be True or False, not {pass_result!r}")
        if not tracked and len(signatures) > 1:  # after= needs records
            raise ConfigurationError(UNTRACKED)
        for index, sig in enumerate(signatures):
            # With pass_result every step but the first takes the result before it as its
            # first argument: its signature must fit with it (checked here, at the call).
            check(sig, f"chain step {index + 1}", takes_result=pass_result and index > 0,
                  step=True)
            _check_step(sig, index, pass_result)
        _check_jids(signatures)
        self.signatures = list(signatures)
        self.pass_result = pass_result

    async def enqueue(self) -> list[str]:
        """Enqueue every step, each after the one before; their jids, in order. What
        could never be chained was refused when the chain was made; a step refused now
        (its chosen jid alive) is a ValueError: the steps before it are enqueued and
        run, and nothing after it was."""
        jids: list[str] = []
        last = len(self.signatures) - 1
        for index, sig in enumerate(self.signatures):
            enqueuer = sig.enqueuer
            if self.pass_result and index < last and enqueuer.job_options.keep_result is None:
                enqueuer = enqueuer.options(keep_result=CHAIN_KEEP_RESULT)
            if jids:  # after the step before, and after what its own options name
                enqueuer = enqueuer.options(after=[*enqueuer.job_options.after, jids[-1]],
                                            pass_result=self.pass_result)
            jid = await enqueuer.enqueue(*sig.args, **sig.kwargs)
            if jid is None:
                raise ValueError(f"chain step {index + 1} ({sig!r}) was refused (its jid "
                                 f"is alive, or a unique duplicate); enqueued: {jids!r}")
            jids.append(jid)
        return jids

    def __repr__(self) -> str:
        return " | ".join(repr(sig) for sig in self.signatures)


def _check_step(sig: Signature, index: int, pass_result: bool) -> None:
    """A ValueError naming step ``index`` (from 0) if it could never be chained: found
    here, at the call, not when the steps before it are already enqueued."""
    what = f"chain step {index + 1} ({sig!r})"
    options = sig.enqueuer.job_options
    if options.unique is not None:
        raise ValueError(f"{what}: a unique job cannot be chained (a duplicate would "
                         "leave the steps after it waiting for nothing)")
    mode = dedup.mode_of(options)
    if mode is not None:
        raise ValueError(f"{what}: a job with {mode[0]} cannot be chained (its enqueues "
                         "are merged or dropped: the steps after it would follow another)")
    if index == 0:
        return
    if pass_result and options.after:
        raise ValueError(f"{what}: its own after= cannot be combined with the chain's "
                         "pass_result (a job takes the result of one parent only)")
    if options.pass_result:
        raise ValueError(f"{what}: pass_result is the chain's (jobs.chain(..., "
                         "pass_result=True)), not a step's")
    try:  # the options the step is enqueued with, as far as they are known now
        replace(options, after=(*options.after, f"chain-step-{index}"),
                pass_result=pass_result)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def _check_jids(signatures: Sequence[Signature]) -> None:
    """A ValueError for steps that would wait for themselves: a step whose own after=
    names its jid, or the jid of a step after it (which runs only after it), or two
    steps with one chosen jid (the second would be refused, the first enqueued)."""
    chosen: dict[str, int] = {}
    for index, sig in enumerate(signatures):
        jid = sig.enqueuer.job_options.jid
        if jid is None:
            continue
        if jid in chosen:
            raise ValueError(f"chain step {index + 1} ({sig!r}): jid {jid!r} is step "
                             f"{chosen[jid] + 1}'s too: a job cannot be chained twice")
        chosen[jid] = index
    for index, sig in enumerate(signatures):
        for parent in sig.enqueuer.job_options.after:
            step = chosen.get(parent)
            if step is None or step < index:
                continue
            if step == index:
                raise ValueError(f"chain step {index + 1} ({sig!r}): after= names its "
                                 f"own jid {parent!r}: it would wait for itself")
            raise ValueError(f"chain step {index + 1} ({sig!r}): after= names {parent!r}, "
                             f"chain step {step + 1}, which runs after it: they would wait "
                             "for each other")
