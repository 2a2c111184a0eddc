"""Control beside the step loop, within a CPU budget (docs/architecture.md, "Control beside
the step loop").

The tuner's replays are pure functions of a snapshot: a :class:`ReplayJob` holds the
window's arrivals, the layout and what to replay on it, and nothing live, so it can run
anywhere. A :class:`ControlWorker` runs the jobs:

- :class:`InlineWorker` runs a job at once, in the caller. The simulator uses it: simulated
  time stands still while a replay runs, so its results are those of a synchronous call
  (latency 0) and recorded results do not move.
- :class:`ClockedWorker` is the simulator's model of a worker process: a job's result comes
  back once its modeled time (:class:`ReplayTimeConfig`, per replayed request) has passed on
  the simulated clock, one job at a time under a CPU budget, and a cancelled job is never
  run. A simulated run then pays what a server pays for its control: the steps go on
  while a tuning replays, at the point there was.
- :class:`ProcessWorker` runs jobs in a child process, so the step loop never waits on a
  replay (a replay is pure Python: in a thread it would hold the GIL the steps need). Its
  results are collected between steps (:meth:`ControlWorker.poll`). It keeps a CPU budget
  (:class:`CpuBudget`): a job starts only while the budget is not overdrawn, its CPU-seconds
  are charged to it, and it refills at ``cpu_share`` of a core, saving up to ``burst_s``
  while idle; a job that runs past ``job_limit_s`` is cancelled, and the jobs after it
  replay a smaller share (:attr:`ControlWorker.scale`) until one comes back quickly. While
  no job may start, the server serves at the point it has. A child is started (and, after a cancel, replaced) from a
  thread of its own: a spawned process's start writes the pickled replay to a pipe its child
  reads only once its interpreter is up, seconds on a busy machine, and on the step loop's
  thread those seconds stopped the steps (a burst that cancelled a replay stalled them 5 to
  25 s).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.schedule.window import WindowEvaluator

log = logging.getLogger(__name__)


class ReplayJob(Protocol):
    """A snapshot the worker replays: ``run`` calls the evaluator and returns a picklable
    result (it must not touch anything live)."""

    def run(self, evaluate: WindowEvaluator) -> Any: ...

    def replayed_requests(self, default_sample: float) -> float:
        """About how many requests ``run`` replays (a simulated worker's cost model)."""
        ...


@dataclass(frozen=True)
class ControlStats:
    """What the control plane's worker did (the bench and the server report it).

    Attributes:
        jobs: jobs finished.
        cpu_s: CPU seconds the finished jobs used.
        longest_job_s: the longest job's wall seconds.
        dropped: jobs given up: cancelled past their limit, replaced by a newer job, or
            finished after a newer one made them stale.
        skipped: jobs not started because the CPU budget had not refilled or a job was
            running.
        scale: the share of the configured sample the next job replays.
    """

    jobs: int = 0
    cpu_s: float = 0.0
    longest_job_s: float = 0.0
    dropped: int = 0
    skipped: int = 0
    scale: float = 1.0


class ControlWorker:
    """Runs replay jobs for the control plane; one job at a time, never a queue of them.

    :meth:`submit` starts a job under a tag and says whether it started; :meth:`poll`
    returns ``(tag, result)`` for each job finished since the last poll. ``scale`` is the
    share of its configured sample and candidates the next job should replay (1.0 until
    the CPU budget forces less)."""

    scale: float = 1.0

    @property
    def busy(self) -> bool:
        return False

    def submit(self, tag: object, job: ReplayJob) -> bool:
        raise NotImplementedError

    def poll(self) -> list[tuple[object, Any]]:
        raise NotImplementedError

    def cancel(self) -> None:
        """Give up the running job (a newer one replaces it); its result is never returned."""

    def stats(self) -> ControlStats:
        return ControlStats()

    def close(self) -> None:
        """Stop the worker (a server shutting down)."""


class InlineWorker(ControlWorker):
    """Runs each job at once in the caller: latency 0 (the simulator)."""

    def __init__(self, evaluate: WindowEvaluator):
        self.evaluate = evaluate
        self._done: list[tuple[object, Any]] = []
        self._jobs = 0

    def submit(self, tag: object, job: ReplayJob) -> bool:
        self._done.append((tag, job.run(self.evaluate)))
        self._jobs += 1
        return True

    def poll(self) -> list[tuple[object, Any]]:
        done, self._done = self._done, []
        return done

    def stats(self) -> ControlStats:
        return ControlStats(jobs=self._jobs)


def _check_burst(burst_s: float) -> None:
    if not burst_s >= 0:
        raise ValueError(
            f"control burst_s={burst_s} must be >= 0 CPU-seconds the budget may save up while idle "
            "(--control-burst-s; e.g. 5, or 0 for none)"
        )


class CpuBudget:
    """The control plane's CPU budget, a token bucket of CPU-seconds.

    It refills at ``share`` of a core and holds at most ``burst_s``; a job may start while
    it is not overdrawn, and what the job costs is charged to it (it may overdraw: a job is
    never cut short for its price). With ``burst_s`` 0 the next job starts ``c / share``
    after a job of ``c`` was charged, as a plain share would have it. With a burst, a worker
    idle through a quiet spell has saved up replays for the burst that ends it: a rise of
    the load, the moment the tuner exists for, is tuned at once rather than after the
    budget of the last tuning has refilled, and over any long stretch the replays still
    use at most ``share`` of a core (plus one ``burst_s``). Starts full.
    """

    def __init__(self, share: float, burst_s: float, now: float):
        self.share, self.burst_s = share, burst_s
        self._credit, self._at = burst_s, now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._credit = min(self.burst_s, self._credit + self.share * (now - self._at))
            self._at = now

    def ready(self, now: float) -> bool:
        """A job may start now."""
        self._refill(now)
        return self._credit >= -1e-9

    def charge(self, cpu_s: float, now: float) -> None:
        self._refill(now)
        self._credit -= cpu_s

    def refund(self, cpu_s: float, now: float) -> None:
        """Give back what a charged job did not use (it was cancelled part-way)."""
        self._refill(now)
        self._credit = min(self.burst_s, self._credit + cpu_s)


@dataclass(frozen=True)
class ReplayTimeConfig:
    """How long a simulated control worker takes over its replays (a server's take the time
    they take).

    Attributes:
        s_per_request: seconds of a worker's core one replayed request costs: a tuning
            replays its candidates on its sampled arrivals, a plan's check its layouts. 0 (the
            default, and every recorded run): a replay takes no simulated time and its result
            is adopted at the event that asked for it. About 0.001 is what one replayed
            request of the paper setting costs this simulator on one core of a 2-core EPYC, so a
            tiered tuning of fourteen candidates on 600 sampled arrivals comes back 8.4 s
            after it started, as it would on a server whose replays run there.
        cpu_share: the share of one core the replays may use, as a server's
            ``--control-cpu-share``: after a job of ``c`` seconds the next starts no sooner
            than ``c / cpu_share`` after it started (1: back to back), less what the
            budget saved up before it (``burst_s``).
        burst_s: the seconds of replay the budget may save up while the worker is idle,
            as a server's ``--control-burst-s`` (:class:`CpuBudget`). 0: none.
    """

    s_per_request: float = 0.0
    cpu_share: float = 1.0
    burst_s: float = 0.0

    def __post_init__(self) -> None:
        if self.s_per_request < 0:
            raise ValueError(
                f"control s_per_request={self.s_per_request} must be >= 0 seconds per replayed request "
                "(0: replays take no simulated time; e.g. 0.001)"
            )
        if not 0 < self.cpu_share <= 1:
            raise ValueError(
                f"control cpu_share={self.cpu_share} must lie in (0, 1]: the share of one core the replays "
                "may use, e.g. 0.05 or 1"
            )
        _check_burst(self.burst_s)

    @property
    def on(self) -> bool:
        return self.s_per_request > 0


class ClockedWorker(ControlWorker):
    """Runs each job once its modeled time has passed on ``clock``: the simulator's model of
    a server's worker process (:class:`ProcessWorker`), so a simulated run pays what the
    live server pays for its control.

    A job of ``w`` replayed requests (its ``replayed_requests``, every replay run to its
    end) takes ``w x s_per_request`` seconds from its start; its result is returned by the
    first :meth:`poll` at or after that time, and until then the cluster serves at the point
    it has. One job at a time: a submit while one is out, or before the budget has
    refilled, is refused, as on a server; :meth:`cancel` drops the job out, which is then
    never run (a rise replaces a tuning of the rate before it). The result is the one an
    inline run gives: a job is a snapshot, replayed whenever it runs.

    Args:
    evaluate: the replay.
    clock: simulated seconds now (the event loop's).
    config: the cost model and the CPU budget.
    default_sample: the share of the window a job with no sample of its own replays.
    """

    def __init__(
        self,
        evaluate: WindowEvaluator,
        clock: Callable[[], float],
        config: ReplayTimeConfig,
        default_sample: float = 1.0,
    ):
        self.evaluate = evaluate
        self.clock = clock
        self.config = config
        self.default_sample = default_sample
        #: ``(tag, job, start, due)`` of the job out (simulated seconds)
        self._out: tuple[object, ReplayJob, float, float] | None = None
        self._budget = CpuBudget(config.cpu_share, config.burst_s, clock())
        self._stats = _Counters()

    @property
    def busy(self) -> bool:
        return self._out is not None

    def seconds(self, job: ReplayJob) -> float:
        """The job's modeled time on the worker's core."""
        return job.replayed_requests(self.default_sample) * self.config.s_per_request

    def submit(self, tag: object, job: ReplayJob) -> bool:
        now = self.clock()
        if self._out is not None or not self._budget.ready(now):
            self._stats.skipped += 1
            return False
        cost = self.seconds(job)
        self._out = (tag, job, now, now + cost)
        self._budget.charge(cost, now)
        return True

    def poll(self) -> list[tuple[object, Any]]:
        if self._out is None or self.clock() < self._out[3]:
            return []
        tag, job, started, due = self._out
        self._out = None
        self._stats.record(due - started, due - started)
        return [(tag, job.run(self.evaluate))]

    def cancel(self) -> None:
        if self._out is not None:
            _, _, started, due = self._out
            self._out = None
            self._stats.dropped += 1
            # The budget pays for the time the job ran, not for the rest of it.
            now = self.clock()
            self._budget.refund(max(due - now, 0.0), now)

    def stats(self) -> ControlStats:
        return self._stats.frozen(self.scale)


@dataclass(frozen=True)
class BudgetConfig:
    """The control plane's CPU budget (serving).

    Attributes:
        cpu_share: the share of one core the replays may use over time (e.g. 0.05): after
            a job that used ``c`` CPU-seconds the next starts no sooner than ``c /
            cpu_share`` seconds later, less what the budget saved up before it.
        burst_s: the CPU-seconds the budget may save up while the worker is idle
            (:class:`CpuBudget`), spent at once on the burst that ends a quiet spell. 0:
            none, every job waits for the last one's share.
        job_limit_s: a job still running after this many wall seconds is cancelled, and
            the next replays half the share the last one did; a job back within an eighth
            of it lets the next replay twice the share again (up to the whole).
        min_scale: the smallest share of the configured sample a job is shrunk to.
        niceness: how much lower the child's CPU priority is than the server's
            (``os.nice``). Where the instances' processes share cores with the control
            plane, a replay then yields the CPU to the steps: at a burst's onset the front end,
            the arrivals' admission and the rise's tuning all wake at once, and on two
            cores the burst's first steps ran about ten times slower than the same work a
            second later. 0: the server's priority.
    """

    cpu_share: float = 0.05
    burst_s: float = 0.0
    job_limit_s: float = 20.0
    min_scale: float = 0.125
    niceness: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.cpu_share <= 1:
            raise ValueError(
                f"control cpu_share={self.cpu_share} must lie in (0, 1]: the share of one core the "
                "tuner's replays may use, e.g. 0.05 (--control-cpu-share)"
            )
        _check_burst(self.burst_s)
        if self.job_limit_s <= 0 or not 0 < self.min_scale <= 1:
            raise ValueError(
                f"control job_limit_s={self.job_limit_s} must be positive seconds and "
                f"min_scale={self.min_scale} must lie in (0, 1]"
            )
        if not 0 <= self.niceness <= 19:
            raise ValueError(
                f"control niceness={self.niceness} must lie in [0, 19]: how much lower the replays' CPU "
                "priority is than the server's (--control-niceness; 0: the same)"
            )


def _serve_jobs(evaluate: WindowEvaluator, jobs, results) -> None:
    """The child process: run each job received and send back ``(tag, result, cpu_s)``."""
    while True:
        item = jobs.get()
        if item is None:
            return
        tag, job = item
        c0 = time.process_time()
        try:
            result = job.run(evaluate)
        except Exception as exc:  # a failed replay must not kill the worker: the tuning is skipped
            log.exception("control worker: a replay job failed")
            result = exc
        results.put((tag, result, time.process_time() - c0))


@dataclass
class _Running:
    tag: object
    started: float


class ProcessWorker(ControlWorker):
    """Runs jobs in a child process under a CPU budget (:class:`BudgetConfig`).

    ``make_evaluator`` is called in the child (it must be picklable, e.g. a module-level
    function or a partial of one) to build the replay once; jobs then travel as data. Until
    the child has built it (:attr:`ready`), no job starts and the server serves as it is.
    ``clock``: wall seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(
        self,
        make_evaluator: Callable[[], WindowEvaluator],
        budget: BudgetConfig = BudgetConfig(),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.make_evaluator = make_evaluator
        self.budget = budget
        self.clock = clock
        self.scale = 1.0
        self._ctx = mp.get_context("spawn")  # no fork of a server's threads
        self._proc = None
        self._starter: threading.Thread | None = None
        self._jobs = self._results = None
        self._running: _Running | None = None
        self._budget = CpuBudget(budget.cpu_share, budget.burst_s, clock())
        self._stats = _Counters()
        self._start_child()

    # ------------------------------------------------------------ child
    def _start_child(self) -> None:
        """A fresh child, started from a thread of its own so the caller (the step loop)
        never waits on it; it becomes :attr:`ready` when its first message comes back."""
        self.ready = False  # no job until the child has built its replay
        old = self._proc
        self._jobs, self._results = self._ctx.Queue(), self._ctx.Queue()
        self._proc = self._ctx.Process(
            target=_child_main,
            args=(self.make_evaluator, self._jobs, self._results, self.budget.niceness),
            daemon=True,
        )

        def start(new=self._proc) -> None:
            if old is not None and old.pid is not None:
                old.join(timeout=5)  # reap the killed one
            new.start()

        self._starter = threading.Thread(target=start, name="control-worker-start", daemon=True)
        self._starter.start()

    def _started(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the child's start to return; whether it has."""
        if self._starter is not None:
            self._starter.join(timeout_s)
        return self._starter is None or not self._starter.is_alive()

    def _restart_child(self) -> None:
        """Kill the child (its job is given up) and start a fresh one. A job runs only on a
        ready child, whose start has returned, so nothing here waits on a start."""
        if self._started(0) and self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._start_child()

    # ------------------------------------------------------------ ControlWorker
    @property
    def busy(self) -> bool:
        return self._running is not None

    def submit(self, tag: object, job: ReplayJob) -> bool:
        if not self.ready:
            self.poll()  # perhaps it is now
        now = self.clock()
        if not self.ready or self._running is not None or not self._budget.ready(now):
            self._stats.skipped += 1
            return False
        self._jobs.put((tag, job))
        self._running = _Running(tag, now)
        return True

    def cancel(self) -> None:
        if self._running is None:
            return
        # The killed child's CPU-seconds never come back: charge the wall time it ran (at most
        # one core for that long), or jobs that each run past their limit would use a whole
        # core for nothing.
        now = self.clock()
        self._budget.charge(max(now - self._running.started, 0.0), now)
        self._running = None
        self._stats.dropped += 1
        self._restart_child()

    def poll(self) -> list[tuple[object, Any]]:
        out = []
        while True:
            try:
                tag, result, cpu_s = self._results.get_nowait()
            except queue.Empty:
                break
            if tag == READY:
                self.ready = True
                continue
            running, self._running = self._running, None
            if running is None or running.tag != tag:
                self._stats.dropped += 1  # cancelled before it came back
                continue
            now = self.clock()
            self._stats.record(cpu_s, now - running.started)
            self._budget.charge(cpu_s, now)
            if now - running.started <= self.budget.job_limit_s / 8 and self.scale < 1:
                # Back well within its limit: twice the share (about four times the work,
                # candidates and sample both) still comes back in half the limit. A scale
                # that only fell would leave a server replaying an eighth after one burst.
                self.scale = min(2 * self.scale, 1.0)
            if not isinstance(result, Exception):
                out.append((tag, result))
        if self._running is not None and self.clock() - self._running.started > self.budget.job_limit_s:
            log.warning(
                "control worker: a replay ran past %.0f s and was cancelled; the next replays %.0f%% of the sample",
                self.budget.job_limit_s,
                100 * max(self.scale / 2, self.budget.min_scale),
            )
            self.scale = max(self.scale / 2, self.budget.min_scale)
            self.cancel()
        return out

    def stats(self) -> ControlStats:
        return self._stats.frozen(self.scale)

    def close(self) -> None:
        if self._proc is None:
            return
        if not self._started(10):  # a start still under way: the child may not be there to stop
            log.warning("control worker: its process was still starting at shutdown; it exits with the server")
            self._proc = None
            return
        try:
            self._jobs.put(None)
            self._proc.join(timeout=2)
        finally:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc = None


#: The tag the child sends once its replay is built (its imports can take seconds).
READY = "__ready__"


def _child_main(make_evaluator: Callable[[], WindowEvaluator], jobs, results, niceness: int) -> None:
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)  # the steps first (BudgetConfig.niceness)
    evaluate = make_evaluator()
    results.put((READY, None, 0.0))
    _serve_jobs(evaluate, jobs, results)


@dataclass
class _Counters:
    jobs: int = 0
    cpu_s: float = 0.0
    longest_job_s: float = 0.0
    dropped: int = 0
    skipped: int = 0

    def record(self, cpu_s: float, wall_s: float) -> None:
        self.jobs += 1
        self.cpu_s += cpu_s
        self.longest_job_s = max(self.longest_job_s, wall_s)

    def frozen(self, scale: float) -> ControlStats:
        return ControlStats(self.jobs, self.cpu_s, self.longest_job_s, self.dropped, self.skipped, scale)


def replay_worker(
    make_evaluator: Callable[[], WindowEvaluator],
    cpu_share: float,
    burst_s: float = 0.0,
    niceness: int = BudgetConfig.niceness,
) -> ControlWorker | None:
    """A server's worker: the replays in a child process under ``cpu_share`` of a core,
    saving up to ``burst_s`` CPU-seconds while idle, ``niceness`` below the server's CPU
    priority; None (replays inline, between steps, as before) where the replay cannot be sent
    to a process, with a warning that says so."""
    budget = BudgetConfig(cpu_share=cpu_share, burst_s=burst_s, niceness=niceness)  # validated before anything starts
    try:
        pickle.dumps(make_evaluator)
    except Exception as exc:  # an artifact that cannot cross a process boundary
        log.warning(
            "the tuner's replay cannot run in a worker process (%s): it runs between steps and holds them up",
            exc,
        )
        return None
    return ProcessWorker(make_evaluator, budget)


def candidates_within(points: Sequence[OperatingPoint], scale: float) -> list[OperatingPoint]:
    """The first ``scale`` share of ``points`` (at least the current point and one other):
    a worker over its budget replays fewer candidates, the current point always first."""
    keep = max(2, round(len(points) * scale))
    return list(points[:keep])
