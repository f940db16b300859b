"""The `serval` command line: one entry point for every component."""
