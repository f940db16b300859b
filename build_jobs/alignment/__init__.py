"""The build job of `statistical` (word-alignment) engines: `build_jobs.alignment.job`."""
