"""Solve a pulp model with HiGHS under a time limit, falling back to CBC."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Optional

import pulp

log = logging.getLogger(__name__)

OPTIMAL, FEASIBLE, INFEASIBLE, NO_SOLUTION = "optimal", "feasible", "infeasible", "no_solution"


@dataclass(frozen=True)
class SolveResult:
    status: str      # optimal | feasible (time limit hit with an incumbent) | infeasible | no_solution
    solver: str
    seconds: float

    @property
    def has_solution(self) -> bool:
        return self.status in (OPTIMAL, FEASIBLE)


def _solvers(time_limit_s: float, rel_gap: Optional[float]):
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


def solve(prob: pulp.LpProblem, time_limit_s: float, rel_gap: Optional[float] = None) -> SolveResult:
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
                log.warning("ILP %s: %s hit the %.1fs time limit; using its best solution",
                            prob.name, name, time_limit_s)
            return SolveResult(status, name, time.perf_counter() - t0)
        log.warning("ILP %s: %s found no solution within %.1fs; trying the fallback",
                    prob.name, name, time_limit_s)
    return SolveResult(NO_SOLUTION, name, time.perf_counter() - t0)
