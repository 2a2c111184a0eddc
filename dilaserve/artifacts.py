"""Where the offline pipeline writes its artifacts, and how the runtime loads them.

Everything lives under ``data/artifacts/`` (git-ignored), or under ``$DILASERVE_ARTIFACTS``
when set. ``dilaserve.serve``, ``dilaserve.sim`` and the notebooks load through these
functions; a missing artifact raises :class:`MissingArtifactError` naming the Dagster
command that builds it.

Layout::

    rollouts/step_table.parquet        one row per step (dilaserve.predict.schema)
    rollouts/requests.parquet          one row per (request, threshold) rollout
    predictor/booster.txt, meta.json   LightGBM predictor (+ one-shot rates in meta)
    predictor/evaluation.json          held-out MAE / relative error tables
    profiles/measured.json             embedded model on this host, TP 1 and 2
    profiles/analytic/<model>-<gpu>.json   calibrated roofline, TP 1/2/4/8
    dynamics/samples.parquet, summary.json step outcomes to replay
    quality/threshold_quality.json     speed-quality table (fixed and mixed thresholds)
    laws/<law>/...                     another step law's rollouts/, predictor/, dynamics/,
                                       quality/ (same layout; e.g. llada-8b-published, or
                                       embedded-bd: the block-causal checkpoint's own)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO_ROOT / "data" / "artifacts"
ENV_VAR = "DILASERVE_ARTIFACTS"

PathLike = str | Path

#: The step law of the embedded model's own recorded steps (the artifacts at the root).
EMBEDDED_LAW = "embedded"
#: The embedded model's steps resampled to Fast-dLLM's published LLaDA tokens per step: a
#: what-if calibrated to published numbers, not a measurement of LLaDA.
PUBLISHED_LAW = "llada-8b-published"
#: The block-causal embedded checkpoint's recorded steps (block diffusion), built by the
#: same assets as the embedded model's in a configured run (``python -m pipelines
#: materialize --law embedded-bd``).
BLOCK_LAW = "embedded-bd"
#: Step laws the simulator can replay (``--dynamics``).
DYNAMICS_LAWS = (EMBEDDED_LAW, PUBLISHED_LAW, BLOCK_LAW)
#: Laws recorded from a checkpoint of their own: the same assets roll it out into the law's
#: folder (paths relative to the repository root).
LAW_CHECKPOINTS = {BLOCK_LAW: "data/models/dila-tiny-bd"}


class MissingArtifactError(FileNotFoundError):
    """An artifact the caller needs has not been built yet."""

    def __init__(self, path: Path, asset: str, law: str | None = None):
        self.path, self.asset = path, asset
        if law in LAW_CHECKPOINTS:
            how = f"`python -m pipelines materialize --law {law}` (rolls out {LAW_CHECKPOINTS[law]})"
        else:
            how = (
                f"\n  DAGSTER_HOME=data/dagster_home dagster asset materialize -m pipelines.definitions "
                f"--select '+{asset}'\n(or `python -m pipelines materialize {asset}`)"
            )
        super().__init__(f"artifact {path} is missing: build it with {how} from the repo root")


@dataclass(frozen=True)
class ArtifactPaths:
    root: Path

    @property
    def step_table(self) -> Path:
        return self.root / "rollouts" / "step_table.parquet"

    @property
    def rollout_requests(self) -> Path:
        return self.root / "rollouts" / "requests.parquet"

    @property
    def predictor_dir(self) -> Path:
        return self.root / "predictor"

    @property
    def predictor_evaluation(self) -> Path:
        return self.predictor_dir / "evaluation.json"

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def measured_profile(self) -> Path:
        return self.profiles_dir / "measured.json"

    def analytic_profile(self, name: str) -> Path:
        """``name`` is ``<model>-<gpu>``, e.g. ``llada-8b-h100``."""
        return self.profiles_dir / "analytic" / f"{name}.json"

    @property
    def dynamics_dir(self) -> Path:
        return self.root / "dynamics"

    @property
    def threshold_quality(self) -> Path:
        return self.root / "quality" / "threshold_quality.json"


def artifact_paths(root: PathLike | None = None) -> ArtifactPaths:
    """Paths under ``root``, else ``$DILASERVE_ARTIFACTS``, else ``data/artifacts``."""
    return ArtifactPaths(Path(root or os.environ.get(ENV_VAR) or DEFAULT_ROOT))


def law_root(law: str, root: PathLike | None = None) -> Path:
    """The artifact root of step law ``law``: the root itself for the embedded law,
    ``laws/<law>/`` under it for the others (the same layout inside)."""
    if law not in DYNAMICS_LAWS:
        raise ValueError(f"unknown step law {law!r}: use one of {', '.join(DYNAMICS_LAWS)}")
    base = artifact_paths(root).root
    return base if law == EMBEDDED_LAW else base / "laws" / law


def root_for_checkpoint(checkpoint: PathLike, root: PathLike | None = None) -> Path:
    """The artifact root built for ``checkpoint``: a configured law's folder when the
    checkpoint is that law's (``data/models/dila-tiny-bd`` has ``laws/embedded-bd/``), else
    ``root`` itself. A server then prices its model with the model's own step law, profile
    and predictor rather than the default checkpoint's."""
    target = Path(checkpoint).resolve()
    for law, folder in LAW_CHECKPOINTS.items():
        if (REPO_ROOT / folder).resolve() == target:
            return law_root(law, root)
    return artifact_paths(root).root


#: The artifacts a simulation replays, relative to each law's root: what a recorded result
#: depends on besides the code. Timings measured on this machine (``profiles/measured.json``),
#: tuning wall times and absolute paths are left out, so two builds of the same code match.
REPLAYED_ARTIFACTS = (
    "rollouts/step_table.parquet",
    "dynamics/samples.parquet",
    "predictor/booster.txt",
)


def fingerprint(root: PathLike | None = None) -> str | None:
    """A short hash of the replayed artifacts of every step law under ``root`` (None where
    none is built): two results recorded on the same fingerprint replayed the same inputs.
    Builds are deterministic for given code, but a change to the model or the pipeline
    rebuilds different rollouts, and a simulation's goodput moves with them."""
    digest, found = hashlib.sha256(), False
    for law in DYNAMICS_LAWS:
        base = law_root(law, root)
        for rel in REPLAYED_ARTIFACTS:
            path = base / rel
            if path.exists():
                digest.update(f"{law}/{rel}".encode())
                digest.update(path.read_bytes())
                found = True
    return digest.hexdigest()[:12] if found else None


def _need(path: Path, asset: str) -> Path:
    if not path.exists():
        raise MissingArtifactError(path, asset)
    return path


def load_step_table(root: PathLike | None = None):
    import polars as pl

    return pl.read_parquet(_need(artifact_paths(root).step_table, "step_features"))


def load_predictor(root: PathLike | None = None):
    """The tuned LightGBM :class:`~dilaserve.predict.base.StepPredictor`."""
    from dilaserve.predict.lgbm import BOOSTER_FILE, LightGBMPredictor

    folder = artifact_paths(root).predictor_dir
    _need(folder / BOOSTER_FILE, "step_predictor")
    return LightGBMPredictor.load(folder)


def load_oneshot(root: PathLike | None = None):
    """The one-shot baseline fitted on the same training requests as the predictor."""
    from dilaserve.predict.base import OneShotPredictor
    from dilaserve.predict.lgbm import META_FILE

    meta = json.loads(_need(artifact_paths(root).predictor_dir / META_FILE, "step_predictor").read_text())
    return OneShotPredictor({float(k): v for k, v in meta["oneshot_steps_per_token"].items()})


def load_predictor_evaluation(root: PathLike | None = None) -> dict:
    return json.loads(_need(artifact_paths(root).predictor_evaluation, "step_predictor").read_text())


def load_profile(name: str = "measured", root: PathLike | None = None):
    """A :class:`~dilaserve.profile.types.LatencyProfile`: ``measured`` or ``<model>-<gpu>``."""
    from dilaserve.profile.types import LatencyProfile

    paths = artifact_paths(root)
    if name == "measured":
        return LatencyProfile.load(_need(paths.measured_profile, "measured_profile"))
    return LatencyProfile.load(_need(paths.analytic_profile(name), "analytic_profiles"))


def available_profiles(root: PathLike | None = None) -> list[str]:
    paths = artifact_paths(root)
    names = ["measured"] if paths.measured_profile.exists() else []
    return names + sorted(p.stem for p in (paths.profiles_dir / "analytic").glob("*.json"))


def load_step_dynamics(root: PathLike | None = None):
    from dilaserve.predict.dynamics import SUMMARY_FILE, StepDynamics

    folder = artifact_paths(root).dynamics_dir
    _need(folder / SUMMARY_FILE, "step_dynamics")
    return StepDynamics.load(folder)


def load_threshold_quality(root: PathLike | None = None):
    from dilaserve.predict.quality import ThresholdQuality

    return ThresholdQuality.load(_need(artifact_paths(root).threshold_quality, "threshold_quality"))
