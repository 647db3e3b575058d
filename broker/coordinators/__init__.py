"""A node's coordinators: the coordinator topic (load, unload, the runtime's log), the
transaction and group services, the marker sender, KIP-890 verification.
"""
