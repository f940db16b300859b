"""Generated from protos/ by scripts/gen_protos.py (`make protos`): never edit by hand."""
