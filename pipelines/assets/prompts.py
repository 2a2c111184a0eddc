"""Prompt sets and the model checkpoint the rollouts decode with."""

from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from dilaserve.predict.prompts import Prompt, load_prompts
from pipelines.resources import ModelResource


class PromptSetConfig(dg.Config):
    prompt_set: Literal["synthetic", "gsm8k"] = Field(
        "synthetic", description="'synthetic' task prompts (embedded model) or 'gsm8k' (real LLaDA / Dream checkpoints)"
    )
    n_requests: int = Field(
        100, ge=2, description="requests to roll out (each at every threshold); at least 2 for a request split"
    )
    seed: int = Field(0, description="seeds which prompts are drawn")
    gen_length: int = Field(
        256, ge=32, description="generation length of GSM8K requests (synthetic tasks size their own)"
    )


@dg.asset(group_name="rollouts")
def prompt_set(context: dg.AssetExecutionContext, config: PromptSetConfig) -> list[Prompt]:
    """The requests every rollout decodes."""
    prompts = load_prompts(config.prompt_set, config.n_requests, config.seed, config.gen_length)
    by_source: dict[str, int] = {}
    for p in prompts:
        by_source[p.source] = by_source.get(p.source, 0) + 1
    context.add_output_metadata(
        {"n": len(prompts), "by_source": by_source, "gen_lengths": sorted({p.gen_length for p in prompts})}
    )
    return prompts


class CheckpointConfig(dg.Config):
    source: Literal["default", "train"] = Field(
        "default",
        description="'default': the model resource's checkpoint (the committed embedded model unless set); "
        "'train': train the embedded model first",
    )
    train_out: str = Field("data/checkpoints/pipeline", description="where a trained checkpoint is written")
    train_minutes: float = Field(30.0, gt=0, description="wall-clock budget of training")
    train_steps: int = Field(8000, ge=1, description="optimizer steps at most")


@dg.asset(group_name="model")
def model_checkpoint(context: dg.AssetExecutionContext, config: CheckpointConfig, model: ModelResource) -> str:
    """Path of the checkpoint every model-running asset uses."""
    if config.source == "train":
        from dilaserve.model.train import TrainConfig, train

        context.log.info(f"training the embedded model for up to {config.train_minutes} min into {config.train_out}")
        _, log = train(
            TrainConfig(out=config.train_out, max_minutes=config.train_minutes, max_steps=config.train_steps)
        )
        path = Path(config.train_out)
        context.add_output_metadata({"trained_steps": log["steps"], "minutes": log["minutes"]})
    else:
        path = model.default_checkpoint()
    if not (path / "config.json").is_file():  # a clear error now rather than deep inside a rollout
        raise dg.Failure(
            f"checkpoint {path} has no config.json: set the model resource's checkpoint to a local "
            "Hugging Face folder, or use model_checkpoint source 'train'"
        )
    context.add_output_metadata({"path": str(path), "source": config.source})
    return str(path)
