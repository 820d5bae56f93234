"""Small learned models that ship with the package (JSON weights, reproducible by their trainers)."""

from pathlib import Path

MODELS_DIR = Path(__file__).parent
