"""The embedded default model: an HF-native masked-diffusion transformer."""

from transformers import AutoConfig, AutoModel

from .configuration import DiLaConfig
from .modeling import DiLaForMaskedDiffusion

# Registering makes AutoModel.from_pretrained work on our local checkpoints.
AutoConfig.register(DiLaConfig.model_type, DiLaConfig, exist_ok=True)
AutoModel.register(DiLaConfig, DiLaForMaskedDiffusion, exist_ok=True)

__all__ = ["DiLaConfig", "DiLaForMaskedDiffusion"]
