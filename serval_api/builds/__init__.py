"""Builds: the state machine and the launchers that run build jobs."""
