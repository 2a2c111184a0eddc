"""The server prices a model with the artifacts built for it, and as its own family."""

from __future__ import annotations

import shutil

from dilaserve import artifacts
from dilaserve.serve.control_inputs import load_control_inputs

BD_CHECKPOINT = artifacts.REPO_ROOT / artifacts.LAW_CHECKPOINTS[artifacts.BLOCK_LAW]


def test_a_law_checkpoint_reads_its_own_law_folder_and_others_the_root(tmp_path):
    assert artifacts.root_for_checkpoint(BD_CHECKPOINT, tmp_path) == tmp_path / "laws" / artifacts.BLOCK_LAW
    assert artifacts.root_for_checkpoint(artifacts.REPO_ROOT / "data/models/dila-tiny", tmp_path) == tmp_path


def test_a_block_causal_model_gets_a_block_causal_step_law_from_its_law_folder(tmp_path, monkeypatch):
    built = artifacts.artifact_paths().threshold_quality  # the default build (make artifacts)
    target = artifacts.artifact_paths(tmp_path / "laws" / artifacts.BLOCK_LAW).threshold_quality
    target.parent.mkdir(parents=True)
    shutil.copy(built, target)
    table = artifacts.load_threshold_quality(target.parent.parent)
    monkeypatch.setattr("dilaserve.serve.control_inputs.quick_profile", lambda *a, **k: None)
    inputs = load_control_inputs(str(BD_CHECKPOINT), "cpu", [0.5, 0.9], str(tmp_path), (1,), 32, block_causal=True)
    assert inputs.step_law is not None and inputs.step_law.block_causal
    # read from the law's folder: the root itself is empty
    assert inputs.accuracy == {0.5: table.accuracy(0.5), 0.9: table.accuracy(0.9)}
    plain = load_control_inputs(str(BD_CHECKPOINT), "cpu", [0.5, 0.9], str(tmp_path), (1,), 32)
    assert not plain.step_law.block_causal
