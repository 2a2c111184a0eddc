"""The discrete-event simulator: the real control plane driven over simulated instances.

One :class:`Simulator` run = one policy over one workload. The simulator only feeds
events (arrivals, reconfiguration ticks, and whatever :class:`SimBackend` reports) to a
:class:`~dilaserve.schedule.scheduler.GlobalScheduler` and records what happens; every
decision is the scheduler's. The run itself is :class:`~dilaserve.sim.run.BaseSimulator`'s;
this class adds the tuner's replay of its recent window
(:class:`~dilaserve.sim.window_replay.WindowReplay`, which simulates through the base, so
the two modules do not import each other).
"""

from __future__ import annotations

from dilaserve.schedule.policies import SchedulerPolicy
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.run import REQUEST_COLUMNS, BaseSimulator, SimConfig, SimResult
from dilaserve.sim.window_replay import WindowReplay

__all__ = ["REQUEST_COLUMNS", "SimConfig", "SimResult", "Simulator"]


class Simulator(BaseSimulator):
    """A :class:`~dilaserve.sim.run.BaseSimulator` whose tuning policies tune, on a replay of
    their recent arrivals over this simulator's own step law."""

    def _window_replay(self, policy: SchedulerPolicy) -> WindowReplay | None:
        """The tuner's replay for ``policy`` (None where it does not tune, or where no
        recorded step law and quality table exist to replay, as in model mode)."""
        if not policy.tune or self.predictors.quality is None or not isinstance(self.progress, ReplayProgress):
            return None
        return WindowReplay(self.setting, self.progress, self.predictors, self.config, policy)
