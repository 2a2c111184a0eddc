"""Remaining-step prediction (docs/architecture.md section 4) and the offline data behind it.

- ``features``: the 11 features; ``base``: the ``StepPredictor`` interface, one-shot and oracle;
- ``prompts`` / ``rollouts``: decode prompt sets step by step into the step-feature table,
  whose contract is ``schema``;
- ``lgbm``: the Optuna-tuned LightGBM predictor; ``evaluate``: held-out MAE / relative error;
- ``dynamics`` / ``quality``: step outcomes and the speed-quality table the simulator replays.

Submodules are imported on use: LightGBM, Optuna and polars stay out of processes that only
need the interface.
"""
