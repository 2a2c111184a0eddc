"""Configuration of the embedded masked-diffusion transformer."""

from __future__ import annotations

from transformers import PretrainedConfig


class DiLaConfig(PretrainedConfig):
    """Hyperparameters of :class:`DiLaForMaskedDiffusion`.

    Args:
        vocab_size: size of the token vocabulary (tokenizer included).
        hidden_size: width of the residual stream.
        num_layers: transformer blocks.
        num_heads: attention heads; must divide ``hidden_size``.
        intermediate_size: width of the SwiGLU MLP.
        max_position_embeddings: longest canvas (prompt + generation) the
            rotary tables are built for; the engine rejects longer requests.
        rope_theta: rotary base.
        mask_token_id / pad_token_id / eos_token_id: reserved ids.
        isolate_prompt: prompt positions attend only to the prompt (the response
            attends to everything, bidirectionally). The prompt's K/V then do not
            depend on the response, so the dual cache keeps them exact; without it
            a model can keep answer state ("which items are written") in the
            prompt positions, which goes stale between recompute steps. A full
            forward then needs ``prompt_lengths`` (it raises without them).
        block_causal: block diffusion (docs/architecture.md, "Block-diffusion models"): the
            response is split into blocks of ``block_length`` tokens, and a token attends to
            the prompt, to earlier blocks and to its own block, never to later ones. The
            prompt and every finished block then have exact K/V that nothing later changes,
            and only the current block is denoised. Implies an isolated prompt (the prompt
            is block -1), so every pass, cache steps included, needs ``prompt_lengths``.
        block_length: response tokens per block in block-causal mode.
        logit_temperature: the logits are divided by it, so the probabilities a
            threshold is compared with are calibrated (temperature scaling). It never
            changes a top-1 token, only how confident the model says it is. Training
            runs at 1.0; ``python -m dilaserve.model.calibrate`` fits it afterwards on
            the states a threshold decode passes through (docs/architecture.md,
            "Confidence calibration").
    """

    model_type = "dila"

    def __init__(
        self,
        vocab_size: int = 64,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        intermediate_size: int = 384,
        max_position_embeddings: int = 256,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        mask_token_id: int = 1,
        pad_token_id: int = 0,
        eos_token_id: int = 2,
        isolate_prompt: bool = True,
        block_causal: bool = False,
        block_length: int = 32,
        logit_temperature: float = 1.0,
        **kwargs,
    ):
        if hidden_size % num_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must divide hidden_size ({hidden_size}); "
                "pick e.g. hidden_size=128 with num_heads=4"
            )
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.initializer_range = initializer_range
        self.mask_token_id = mask_token_id
        if block_causal and not isolate_prompt:
            raise ValueError(
                "block_causal=True needs isolate_prompt=True: the prompt is the first causal block "
                "and must not attend to the response"
            )
        if block_length < 1:
            raise ValueError(f"block_length must be at least 1, got {block_length}; the embedded models use 32")
        if not logit_temperature > 0:
            raise ValueError(
                f"logit_temperature must be positive, got {logit_temperature}; 1.0 leaves the logits as trained"
            )
        self.logit_temperature = float(logit_temperature)
        self.isolate_prompt = isolate_prompt
        self.block_causal = block_causal
        self.block_length = block_length
        super().__init__(pad_token_id=pad_token_id, eos_token_id=eos_token_id, **kwargs)
