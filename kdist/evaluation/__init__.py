"""A finished (or running) run reopened: its model evaluated, followed by a sidecar, predicted."""
