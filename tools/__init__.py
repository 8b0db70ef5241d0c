"""The `ferry` command line, the local-cluster launcher, benchmarks, the rebalancer and the autoscaling harness."""
