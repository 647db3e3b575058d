"""The cluster: nodes (``BrokerNode``, and ``NodeRegistration``, the cluster's record of one),
replicas, leadership and their replication, the in-process network between nodes,
topics and their configs, producer id blocks.
"""

# A node's states (``NodeRegistration.state``), read by the cluster and its replication:
# paused reads requests but answers none (a hung machine).
RUNNING, PAUSED, STOPPED = "running", "paused", "stopped"
