"""The operations a client may perform on each kind of resource, as Kafka reports them when asked
(Metadata's and DescribeCluster's ``include_*_authorized_operations``, DescribeGroups'
``include_authorized_operations``).

Ferry has no authorizer (ACLs), so, as a Kafka broker without ``authorizer.class.name``, it
grants everything: each answer lists every operation applicable to the resource's type (Kafka's
AclEntry.supportedOperations). The values are AclOperation codes; kafka-python's messages encode
a set of them as the 32-bit field the wire carries (bit n set for code n).
"""
from __future__ import annotations

# AclOperation codes
READ = 3
WRITE = 4
CREATE = 5
DELETE = 6
ALTER = 7
DESCRIBE = 8
CLUSTER_ACTION = 9
DESCRIBE_CONFIGS = 10
ALTER_CONFIGS = 11
IDEMPOTENT_WRITE = 12

TOPIC_OPERATIONS = frozenset({READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS})
GROUP_OPERATIONS = frozenset({READ, DESCRIBE, DELETE})
CLUSTER_OPERATIONS = frozenset({CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER,
                                DESCRIBE})

