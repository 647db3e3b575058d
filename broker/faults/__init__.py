"""Fault injection: request fault rules (the per-request check, the rules, what a
request names, error answers) and scenarios. Link faults live with the network
(broker/cluster/network.py, ``LinkFaults``).
"""
