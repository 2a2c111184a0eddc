"""Resources shared by the assets: the model host and the artifact folder."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from dilaserve.artifacts import EMBEDDED_LAW, ArtifactPaths, law_root
from dilaserve.engine import DEFAULT_CHECKPOINT


class ModelResource(dg.ConfigurableResource):
    """Where rollouts and profiles run.

    Point ``checkpoint`` at a local LLaDA or Dream folder (as published, or one from
    ``python -m dilaserve.model.make_tiny``) and the same assets roll it out, record its
    step dynamics, measure its profile with real TP ranks and train a predictor for it; on
    a GPU host set ``device: cuda`` too (and use ``prompt_set: gsm8k`` for prompts a real
    model can read).
    """

    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:N``."""
    checkpoint: str = ""
    """Checkpoint folder used when the ``model_checkpoint`` asset is set to ``source: default``;
    empty means the committed embedded model (data/models/dila-tiny)."""
    threads: int = 1
    """Torch CPU threads for rollouts. The embedded model's steps are small: on a busy host a
    second thread contends with other processes and can make rollouts many times slower."""

    def default_checkpoint(self) -> Path:
        return Path(self.checkpoint) if self.checkpoint else DEFAULT_CHECKPOINT

    def engine(self, checkpoint: str | Path):
        import torch

        from dilaserve.engine import DenoisingEngine

        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(
                f"device {self.device!r} requested but CUDA is not available: set the model resource's device to cpu"
            )
        torch.set_num_threads(max(1, self.threads))
        return DenoisingEngine.from_pretrained(checkpoint, device=self.device)


class ArtifactsResource(dg.ConfigurableResource):
    """The folder the runtime loads artifacts from (see :mod:`dilaserve.artifacts`)."""

    root: str = ""
    """Empty means ``$DILASERVE_ARTIFACTS`` or ``data/artifacts``."""

    def paths(self, law: str = EMBEDDED_LAW) -> ArtifactPaths:
        """The artifact paths of step law ``law`` (the root's own for the embedded model)."""
        return ArtifactPaths(law_root(law, self.root or None))
