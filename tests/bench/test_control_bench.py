"""The control bench's ILP timing reports each solve's status next to its seconds."""

from dilaserve.bench.control import bench_ilp


def test_bench_ilp_reports_whether_every_solve_proved_optimality():
    run = bench_ilp(16)
    assert len(run.statuses) == 2  # stage 1 (both of its solves), stage 2
    assert run.optimal == all(s == "optimal" for s in run.statuses)
    assert run.statuses[1] == "optimal"  # stage 2 is a small assignment problem
    assert 0 < run.cpu_seconds and 0 < run.seconds
