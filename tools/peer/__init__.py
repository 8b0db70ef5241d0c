"""Apache Kafka as a peer: its command-line tools and Java client run unmodified against Ferry.

``kafka_tools`` finds the jars and runs a tool; ``verifiable`` reads what Kafka's verifiable
producer and consumer print and checks it; ``checks`` are the tool checks, ``java_client`` the
Java client through moves and a kill -9; ``conformance`` runs them all and prints one table.
"""
