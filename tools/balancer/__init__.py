"""`ferry balancer`: continuous self-balancing of a cluster's partitions (docs/rebalance.md)."""
