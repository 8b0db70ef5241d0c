"""Apache Kafka as a peer: its command-line tools and Java client run unmodified against Ferry.

``jars`` finds the jars ``make kafka-jars`` fetched (``kafka-pom.xml``); ``apache_kafka`` starts
Apache Kafka itself (KRaft) as the peer benchmarks measure against; ``kafka_tools`` runs a tool; ``verifiable`` reads what Kafka's verifiable
producer and consumer print and checks it; ``checks`` are the tool checks, ``java_client`` the
Java client through moves and a kill -9; ``conformance`` runs them all and prints one table.
"""
