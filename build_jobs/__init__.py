"""Build jobs: one fine-tune (or inference-only publish) that produces a new model revision."""
