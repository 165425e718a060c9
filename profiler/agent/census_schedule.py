"""When the agent takes a census of live tensors (agent/census.py), and sending it.

Censuses are taken between iterations, in the thread that runs the loop, so the loop's own
frames (its locals: the list that keeps outputs, the running total) are on the stack. The
loop's iterations are its optimizer steps, else its backward passes, else its outermost
forwards (as profiler/profile/series.py counts them): once a kind of higher rank has been seen,
the lower ones no longer trigger censuses.

"auto": at iterations 5, 10, 20, 40, ... (doubling: a long run gets a few censuses, spread over
it), "every-N": every N iterations, "never": none. Either way a census waits (to a later
iteration) while censuses so far have taken more than BUDGET_SHARE of the run's wall time
(and more than BUDGET_FLOOR_S in all), a census counting its CPU time (on a busy machine its
pauses last longer, and the run too, by the time other processes take).
One pause lasts at most MAX_PAUSE_S: a census that needs longer (a heap of millions of
objects) goes on from where it stopped at the next iterations, one slice each, as long as
censuses so far have taken at most SLICES_SHARE of the run, and is sent once whole
(census.CensusProgress). None runs while the code is traced, compiled or transformed, or while
a torch function or dispatch mode is active (census.unsafe_because): it waits for the next
iteration.

A program with no iterations at all (tensor code without a module or an optimizer) gets its
censuses on the clock instead, from the agent's thread (on_clock): CLOCK_FIRST_S seconds after
torch's import and then at doubling times ("auto"), or every N seconds ("every-N"), with the
same budget, marked `iterations_are: "time"`.

The budget lets the first two censuses of each kind (the loop's iterations, or the clock)
start whatever they cost: one census compares with nothing, and a short loop whose first
census was slow, or a program whose censuses on the clock came first because it was slow to
reach its loop on a busy machine, would otherwise never name a holder. And once the loop has
begun, its censuses are charged their own cost only: a census on the clock, taken while the
script was still importing and building (costly: 40-140 ms against the loop's ~10 ms), left a
short loop on a busy machine its first two censuses and no later one, both before the climb a
leak is judged on, so the leak's holder went unnamed. Censuses on the clock come only before
the loop, so the run's censuses still cost at most about twice BUDGET_SHARE.

An out-of-memory error gets a census of its own (at_error), whatever the budget: what was
alive when memory ran out, the frames the error left included. At most MAX_ERROR_CENSUSES a
run, and none with "never".
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Optional

from ..protocol import ITERATION_KINDS, OPTIMIZER_STEPS
from .port import AgentPort

# The kinds of iterations, best first: once a better kind was seen, the others no longer count.
ITERATION_RANK = {kind: rank for rank, kind in enumerate(ITERATION_KINDS)}
ON_THE_CLOCK = "time"  # a census taken on the clock: `iteration` counts those censuses
CLOCK_FIRST_S = 2.0
FIRST = 5
BUDGET_SHARE = 0.005
SLICES_SHARE = 0.01  # a census in slices goes on while censuses have taken at most this
# Early in a run the shares allow next to nothing: censuses may always take this much in all
# (a short loop of a few seconds gets its censuses; a long run is held to its shares).
BUDGET_FLOOR_S = 0.05
MAX_PAUSE_S = 0.2
# The walk stops this much before MAX_PAUSE_S: the census' result and its release come after it.
END_MARGIN_S = 0.005
MAX_ERROR_CENSUSES = 3


def warm_up() -> None:
    """What the first census would otherwise load inside its pause (the census module, the
    interpreter's folders, `resource`): imports read files, and a read lets go of the GIL,
    which busy threads of the script may then keep for a long while. Done at torch's import."""
    from ..codefiles import installation_dirs
    from . import census  # noqa: F401 (loaded, with the modules it imports)
    from .census_bytes import _rss

    installation_dirs()
    _rss()


def every_from_mode(mode: str) -> Optional[int]:
    """N for "every-N", 0 for "auto", None for "never" (or anything unreadable)."""
    if mode == "auto":
        return 0
    if mode.startswith("every-") and mode[6:].isdigit() and int(mode[6:]) >= 1:
        return int(mode[6:])
    return None


class CensusSchedule:
    def __init__(self, agent: AgentPort, torch: Any, mode: str) -> None:
        self.agent = agent
        self.torch = torch
        self.every = every_from_mode(mode)
        # The run's wall time counts from the agent's start (the interpreter's), not from
        # torch's import.
        self._started = float(getattr(agent, "started", time.monotonic()))
        self._spent = 0.0
        self._spent_on_clock = 0.0  # of _spent: the censuses on the clock (before the loop)
        self._rank = len(ITERATION_RANK)  # the best kind of iteration seen so far
        self._next: Dict[str, int] = {}
        self._taken_by_kind: Dict[str, int] = {}  # censuses sent, by kind
        self.skipped = 0
        self._at = (OPTIMIZER_STEPS, 0)  # the last iteration boundary: kind, index
        self._errors = 0
        self._progress: Optional[Any] = None  # census.CensusProgress of a census in slices
        # Seconds since torch's import (this schedule's start): the import itself, often
        # seconds, is no time to take censuses in.
        self._clock_started = time.monotonic()
        self._clock_next = CLOCK_FIRST_S
        self._clock_taken = 0
        # The script's threads take censuses at iterations, the agent's on the clock.
        self._busy = threading.Lock()
        if self.every is not None:
            warm_up()

    def _over_budget(self, share: float, kind: Optional[str] = None) -> bool:
        """Censuses so far took more than `share` of the run. The first two of a kind of
        iterations (or on the clock) may start whatever that says: censuses are compared
        within their kind, and a program slow to reach its loop (on a busy machine) may have
        had its censuses on the clock first. Every slice of a census in slices (`kind` None)
        keeps to it."""
        if kind is not None and self._taken_by_kind.get(kind, 0) < 2:
            return False
        allowed = max(share * (time.monotonic() - self._started), BUDGET_FLOOR_S)
        spent = self._spent
        if kind is not None and kind != ON_THE_CLOCK:
            spent -= self._spent_on_clock  # the loop's censuses, charged their own cost
        return spent > allowed

    def on_clock(self) -> None:
        """The agent's thread, now and then: a census on the clock where the program has shown
        no iteration (yet)."""
        if self.every is None or self._rank < len(ITERATION_RANK):
            return
        elapsed = time.monotonic() - self._clock_started
        if self._progress is None and elapsed < self._clock_next:
            return
        if not self._busy.acquire(blocking=False):
            return
        try:
            if self._rank < len(ITERATION_RANK):
                return  # iterations began meanwhile
            if self._progress is not None:
                if not self._over_budget(SLICES_SHARE):
                    index = self._clock_taken + 1
                    self._take(ON_THE_CLOCK, index, progress=self._progress, clock=True)
                return
            if self._over_budget(BUDGET_SHARE, ON_THE_CLOCK):
                self.skipped += 1
                return
            step = float(self.every) if self.every else self._clock_next
            self._clock_next = elapsed + step
            self._take(ON_THE_CLOCK, self._clock_taken + 1, clock=True)
        finally:
            self._busy.release()

    def at_boundary(self, kind: str, index: int) -> None:
        """Iteration `index` (1-based) of `kind` just ended (or, for forwards, begins)."""
        if self.every is None:
            return
        rank = ITERATION_RANK[kind]
        if rank > self._rank:
            return
        self._rank = rank
        self._at = (kind, index)
        if not self._busy.acquire(blocking=False):
            return  # a census on the clock is under way (iterations just began)
        try:
            self._boundary(kind, index)
        finally:
            self._busy.release()

    def _boundary(self, kind: str, index: int) -> None:
        if self._progress is not None:
            self._go_on(kind, index)
            return
        due = self._next.setdefault(kind, self.every or FIRST)
        if index < due:
            return
        if self._over_budget(BUDGET_SHARE, kind):
            self.skipped += 1  # over budget: try again at the next iteration
            return
        from .census import safe_to_run

        if not safe_to_run(self.torch):
            return
        self._next[kind] = index + self.every if self.every else max(due * 2, index + 1)
        self._take(kind, index)

    def _go_on(self, kind: str, index: int) -> None:
        """The next slice of the census in slices, if the budget and the moment allow."""
        if self._over_budget(SLICES_SHARE):
            self.skipped += 1
            return
        from .census import safe_to_run

        if safe_to_run(self.torch):
            self._take(kind, index, progress=self._progress)

    def at_error(self, traceback: Any, exc_id: int) -> None:
        """An out-of-memory error (exception exc_id) was raised: a census of what was alive,
        its traceback's frames included, marked `at: "oom"` and taken at the last iteration."""
        if self.every is None or self._errors >= MAX_ERROR_CENSUSES:
            return
        from .census import safe_to_run

        if not safe_to_run(self.torch):
            return
        self._errors += 1
        kind, index = self._at
        self._take(kind, index, traceback=traceback, at="oom", exc_id=exc_id)

    def _take(
        self,
        kind: str,
        index: int,
        traceback: Any = None,
        progress: Optional[Any] = None,
        clock: bool = False,
        **marks: Any,
    ) -> None:
        from .census import CensusProgress, take_census
        from .census_own import raised_by_the_script, scripts_part

        if progress is None and traceback is None:
            progress = CensusProgress()  # an error's census is taken whole, in one pause
        census = None
        # What the census costs: its CPU time (in the loop's thread, or the agent's), not the
        # collection that the allocations it made while the collector was off may set off
        # right after (that one would have come a little later anyway). CPU, not the pause's
        # wall time: on a busy machine a pause is longer by the time other processes ran, and
        # so is the run, but a budget charged the longer pause against the same share would
        # let a census in slices finish only much later, or not in a short loop.
        began = time.thread_time()
        cpu_before = progress.cpu_us if progress is not None else 0
        try:
            # What the roots hold, not every tensor gc tracks: listing those (to count what no
            # root reaches) costs ~80 ms in any process that imported torch, which alone would
            # spend a short run's whole budget.
            census = take_census(
                self.torch,
                max_seconds=MAX_PAUSE_S - END_MARGIN_S,
                # From the agent's thread the script is not paused, only while the census
                # holds the GIL: its own CPU time is the pause.
                thread_time=clock,
                find_unreached=False,
                traceback=traceback,
                progress=progress,
                # On the clock, from the agent's thread: its own stack is memsight's.
                exclude_threads=frozenset({threading.get_ident()}) if clock else frozenset(),
            )
            data = census.to_json()
        except Exception as exc:  # a census must never break the script
            if progress is not None:
                self._progress = None  # the census in slices ends here
            if raised_by_the_script(exc):
                # A signal handler's (a per-step timeout): the script's own exception, shown
                # from the handler on, without the census' frames between.
                raise exc.with_traceback(scripts_part(exc.__traceback__))  # noqa: B904 (itself)
            self.agent.error("census", exc)
            return
        finally:
            spent = time.thread_time() - began
            if census is not None:
                cpu_us = census.cost["cpu_us"]  # a census in slices: the slices' sum so far
                spent = (cpu_us - cpu_before if progress is not None else cpu_us) / 1e6
            self._spent += spent
            if clock:
                self._spent_on_clock += spent
        if progress is not None:
            if data["cost"].get("continues"):
                self._progress = progress  # sent once whole
                return
            self._progress = None
        self._taken_by_kind[kind] = self._taken_by_kind.get(kind, 0) + 1
        if kind == ON_THE_CLOCK:
            self._clock_taken += 1
        self.agent.event("census", iterations_are=kind, iteration=index, census=data, **marks)
