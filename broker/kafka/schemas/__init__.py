"""Message schemas (Kafka's JSON message-spec format) that the pinned kafka-python does not carry;
:mod:`broker.kafka.consumer_group_messages` builds the generated message classes from them."""
