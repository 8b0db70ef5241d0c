"""Autoscaling experiments: a real local cluster under open-loop load following a scenario."""
