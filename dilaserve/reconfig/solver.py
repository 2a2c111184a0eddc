"""Solve a pulp model with HiGHS under a time limit, falling back to CBC.

A solve may start from the variables' current values (``warm_start``): a second solve of a
lexicographic objective then begins at the first one's optimum, which is feasible for it.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import pulp

log = logging.getLogger(__name__)

OPTIMAL, FEASIBLE, INFEASIBLE, NO_SOLUTION = "optimal", "feasible", "infeasible", "no_solution"

#: HiGHS settings for these small models (tens of integer variables, a few hundred rows).
#: One thread: parallel workers gain nothing at this size and, on a machine shared with the
#: simulator or other jobs, their contention turns sub-second solves into time-limit exits.
#: No RINS/RENS/root-reduced-cost sub-MIPs: they spent most of the solve time here while
#: branch-and-bound (and a warm start, where given) finds the incumbents anyway.
HIGHS_OPTIONS = {
    "threads": 1,
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
}


@dataclass(frozen=True)
class SolveResult:
    status: str  # optimal | feasible (time limit hit with an incumbent) | infeasible | no_solution
    solver: str
    seconds: float

    @property
    def has_solution(self) -> bool:
        return self.status in (OPTIMAL, FEASIBLE)

    @property
    def optimal(self) -> bool:
        """The solver proved its solution optimal (within its MIP gap), not a time-limit exit."""
        return self.status == OPTIMAL

    def then(self, other: SolveResult) -> SolveResult:
        """Two solves in sequence as one: optimal only when both were, their seconds summed."""
        status = OPTIMAL if self.optimal and other.optimal else (FEASIBLE if self.has_solution else self.status)
        solver = self.solver if self.solver == other.solver else f"{self.solver}+{other.solver}"
        return SolveResult(status, solver, self.seconds + other.seconds)


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


class _HiGHS(pulp.HiGHS):
    """pulp's HiGHS, optionally handed the variables' current values as its first incumbent
    (pulp's own HiGHS interface takes no start)."""

    def __init__(self, warm_start: bool, **kw):
        super().__init__(**kw)
        self.warm_start = warm_start

    def callSolver(self, lp: pulp.LpProblem) -> None:
        if self.warm_start:
            # buildSolverModel numbered the columns (var.index); varValue still holds the
            # previous solve's values.
            cols = [v for v in lp.variables() if v.varValue is not None]
            if cols:
                idx = np.array([v.index for v in cols], dtype=np.int32)
                val = np.array([float(v.varValue) for v in cols])
                lp.solverModel.setSolution(len(cols), idx, val)
        super().callSolver(lp)


def _solvers(time_limit_s: float, rel_gap: float | None, warm_start: bool):
    _swallow_highs_banner()
    yield "HiGHS", lambda: _HiGHS(warm_start, msg=False, timeLimit=time_limit_s, gapRel=rel_gap, **HIGHS_OPTIONS)
    yield "CBC", lambda: pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=rel_gap, warmStart=warm_start)


def _classify(prob: pulp.LpProblem) -> str:
    if prob.sol_status == pulp.LpSolutionOptimal:
        return OPTIMAL
    if prob.sol_status == pulp.LpSolutionIntegerFeasible:
        return FEASIBLE
    if prob.status == pulp.LpStatusInfeasible or prob.sol_status == pulp.LpSolutionInfeasible:
        return INFEASIBLE
    return NO_SOLUTION


def solve(
    prob: pulp.LpProblem, time_limit_s: float, rel_gap: float | None = None, warm_start: bool = False
) -> SolveResult:
    """Try HiGHS, then CBC when HiGHS fails or stops without any solution.

    ``rel_gap`` is the relative MIP gap at which a solution counts as optimal (solver
    default when None). ``warm_start``: start from the variables' current values (a
    feasible point of ``prob``, such as the previous solve's solution).

    A proof of infeasibility is final; a time-out without an incumbent is not, since the
    other solver may find one.
    """
    t0 = time.perf_counter()
    name = "none"
    for name, make in _solvers(time_limit_s, rel_gap, warm_start):
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
