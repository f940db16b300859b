"""The serving benchmark suite: `python -m bench` (see bench/README.md). Run by hand, never as a timed
test."""
