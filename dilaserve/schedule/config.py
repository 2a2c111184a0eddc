"""Configuration of the global scheduler."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler settings that are not part of a policy.

    Attributes:
        max_request_tokens: requests with more tokens (prompt + output) are rejected. None
            derives the limit from the largest batch any configured instance can hold.
        warn_interval_s: minimum event time between two repeated warnings of one kind
            (empty cluster, deferral), so an overload does not flood the log.
        replace_failed_instances: when an instance dies, launch one of the same TP degree
            on the same GPUs in its place (its requests are re-queued either way). An
            instance a running reconfiguration plan was going to stop is not replaced: the
            plan has other use for its GPUs. The server turns this off while it shuts down.
        fit_headroom: slack-aware placement (``slack_fit`` dispatch) puts a request on the
            busiest instance where it, and every request already there, keeps this share of
            its SLO time left free at the threshold it is admitted on. It absorbs prediction
            error and the batch growing later; the rest of the slack is what the request
            lends the cluster.
    """

    max_request_tokens: int | None = None
    warn_interval_s: float = 5.0
    replace_failed_instances: bool = True
    fit_headroom: float = 0.5

    def __post_init__(self) -> None:
        if self.max_request_tokens is not None and self.max_request_tokens <= 0:
            raise ValueError(
                f"SchedulerConfig.max_request_tokens={self.max_request_tokens}: give a positive "
                "token limit, or None to use the largest instance batch"
            )
        if self.warn_interval_s < 0:
            raise ValueError("SchedulerConfig.warn_interval_s must be >= 0 (0 logs every occurrence)")
        if not 0 <= self.fit_headroom < 1:
            raise ValueError(
                f"SchedulerConfig.fit_headroom={self.fit_headroom} must lie in [0, 1): the share of SLO time "
                "left a placed request keeps free (try 0.5)"
            )
