"""Solve a pulp model with HiGHS under a time limit, falling back to CBC."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from dataclasses import dataclass

import pulp

log = logging.getLogger(__name__)

OPTIMAL, FEASIBLE, INFEASIBLE, NO_SOLUTION = "optimal", "feasible", "infeasible", "no_solution"


@dataclass(frozen=True)
class SolveResult:
    status: str  # optimal | feasible (time limit hit with an incumbent) | infeasible | no_solution
    solver: str
    seconds: float

    @property
    def has_solution(self) -> bool:
        return self.status in (OPTIMAL, FEASIBLE)


@functools.cache
def _swallow_highs_banner() -> None:
    """Construct HiGHS once with stdout pointed at /dev/null.

    HiGHS prints its copyright banner from C++ the first time a solver is constructed in
    a process, before pulp can turn its output off; on stdout it would corrupt the
    one-JSON-line output of the benchmarks and experiments.
    """
    try:
        import highspy
    except ImportError:  # pulp then reports HiGHS unavailable and CBC takes over
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solvers(time_limit_s: float, rel_gap: float | None):
    _swallow_highs_banner()
    yield "HiGHS", lambda: pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=rel_gap)
    yield "CBC", lambda: pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=rel_gap)


def _classify(prob: pulp.LpProblem) -> str:
    if prob.sol_status == pulp.LpSolutionOptimal:
        return OPTIMAL
    if prob.sol_status == pulp.LpSolutionIntegerFeasible:
        return FEASIBLE
    if prob.status == pulp.LpStatusInfeasible or prob.sol_status == pulp.LpSolutionInfeasible:
        return INFEASIBLE
    return NO_SOLUTION


def solve(prob: pulp.LpProblem, time_limit_s: float, rel_gap: float | None = None) -> SolveResult:
    """Try HiGHS, then CBC when HiGHS fails or stops without any solution.

    ``rel_gap`` is the relative MIP gap at which a solution counts as optimal (solver
    default when None).

    A proof of infeasibility is final; a time-out without an incumbent is not, since the
    other solver may find one.
    """
    t0 = time.perf_counter()
    name = "none"
    for name, make in _solvers(time_limit_s, rel_gap):
        try:
            prob.solve(make())
        except Exception as exc:  # a missing binary or a solver crash: try the next one
            log.warning("ILP %s: solver %s failed (%s); trying the fallback", prob.name, name, exc)
            continue
        status = _classify(prob)
        if status != NO_SOLUTION:
            if status == FEASIBLE:
                log.warning(
                    "ILP %s: %s hit the %.1fs time limit; using its best solution", prob.name, name, time_limit_s
                )
            return SolveResult(status, name, time.perf_counter() - t0)
        log.warning("ILP %s: %s found no solution within %.1fs; trying the fallback", prob.name, name, time_limit_s)
    return SolveResult(NO_SOLUTION, name, time.perf_counter() - t0)
