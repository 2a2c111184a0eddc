import numpy as np
import pytest

from dilaserve.cluster.base import StepAssignment
from dilaserve.predict.replay import ReplayTable
from dilaserve.sim.progress import MASK_ID, ReplayProgress
from dilaserve.sim.workload import WorkloadRequest
from tests.sim.builders import dynamics, quality, varied_dynamics


def test_expected_steps_by_hand():
    table = ReplayTable(dynamics({0.9: [4], 0.5: [8, 24]}))
    assert table.block_steps(0.9, 32)[0] == pytest.approx(8.0)  # 32 / 4
    assert table.expected_steps(256, 32, 0.9) == pytest.approx(64.0)
    # 0.5: from 0, either 8 or 24 tokens. E[24] = 1 (any draw finishes); E[16] = 1 + (E[24] + 0)/2
    # = 1.5; E[8] = 1 + (E[16] + 0)/2 = 1.75; E[0] = 1 + (E[8] + E[24])/2 = 2.375.
    assert table.block_steps(0.5, 32)[0] == pytest.approx(2.375)
    assert table.index_of(0.88) == table.index_of(0.9)  # nearest recorded threshold


def test_replay_matches_its_expectation_and_tracks_progress():
    table = ReplayTable(varied_dynamics())
    progress = ReplayProgress(table, quality(), seed=3)
    steps = []
    for i in range(300):
        st = progress.new_state(WorkloadRequest(f"r{i}", 0.0, 50, 128), 32)
        assert table.expected_remaining(st, 0.7) == pytest.approx(table.expected_steps(128, 32, 0.7))
        while not st.finished:
            before = st.num_unmasked
            progress.step([StepAssignment(st, 0.7)])
            assert st.num_unmasked > before and st.progress_features()[2] == st.num_unmasked / 128
            if not st.finished:
                assert st.unmasked_in_block == np.count_nonzero(st.response[st.block_slice] != MASK_ID)
        steps.append(st.steps_done)
        assert st.recompute_steps_done == 4  # one per block, with the cache on
    assert np.mean(steps) == pytest.approx(table.expected_steps(128, 32, 0.7), rel=0.05)


def test_replay_is_deterministic_per_request():
    table = ReplayTable(varied_dynamics())

    def run(seed):
        progress = ReplayProgress(table, quality(), seed=seed)
        st = progress.new_state(WorkloadRequest("same", 0.0, 10, 64), 32)
        while not st.finished:
            progress.step([StepAssignment(st, 0.5)])
        return st.tokens_per_step

    assert run(1) == run(1)


def test_quality_estimate_uses_the_measured_table():
    q = quality()
    progress = ReplayProgress(ReplayTable(varied_dynamics()), q)
    st = progress.new_state(WorkloadRequest("r", 0.0, 10, 32), 32)
    st.thresholds_used = [0.9, 0.9]
    assert progress.quality(None, st) == pytest.approx(0.95)
    st.thresholds_used = [0.5, 0.9]
    assert progress.quality(None, st) == pytest.approx(min(1.0, 0.85 * q.mix_factor))
