"""Load-balanced reassignment planning: samples -> Spark aggregation -> goal-driven plan -> Kafka reassignment JSON."""
