"""The Kafka wire protocol front end of a broker (see docs/kafka.md)."""
