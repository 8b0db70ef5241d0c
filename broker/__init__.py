"""Brokers: partitions on top of streams, the HTTP API and the six-step move."""
