"""Small learned models that ship with the package (JSON weights, reproducible by their trainers)."""
