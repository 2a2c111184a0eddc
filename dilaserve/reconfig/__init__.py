"""Reconfiguration: workload monitor, two-stage ILP (pulp), plan execution."""

from dilaserve.reconfig.config import ClusterConfig, MonitorConfig, ReconfigConfig
from dilaserve.reconfig.executor import Drain, Launch, PlanExecutor, Stop
from dilaserve.reconfig.monitor import RequestClass, WorkloadMonitor
from dilaserve.reconfig.plan import PlanStep, ReconfigPlan, all_tp1_node_counts, build_plan, static_layout
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.reconfig.stage1 import CapacityPlan, CapacityProblem, check_capacity_plan, solve_capacity
from dilaserve.reconfig.stage2 import Placement, check_placement, greedy_placement, solve_placement

__all__ = [
    "CapacityPlan",
    "CapacityProblem",
    "ClusterConfig",
    "Drain",
    "Launch",
    "MonitorConfig",
    "Placement",
    "PlanExecutor",
    "PlanStep",
    "ReconfigConfig",
    "ReconfigPlan",
    "Reconfigurator",
    "RequestClass",
    "Stop",
    "WorkloadMonitor",
    "all_tp1_node_counts",
    "build_plan",
    "check_capacity_plan",
    "check_placement",
    "greedy_placement",
    "solve_capacity",
    "solve_placement",
    "static_layout",
]
