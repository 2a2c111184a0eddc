"""Where the embedded default checkpoint lives (kept apart from the engine, which imports
torch, so that flags and configs can name it cheaply)."""

from pathlib import Path

DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[2] / "data" / "models" / "dila-tiny"
