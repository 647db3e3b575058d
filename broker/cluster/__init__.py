"""The cluster: nodes (``BrokerNode``, and ``NodeRegistration``, the cluster's record of one),
replicas and leadership, the emulated replication, the in-process network between nodes,
topics and their configs, producer id blocks.
"""
