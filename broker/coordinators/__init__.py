"""A node's coordinators: the coordinator topic (load, unload, the runtime's log), the
transaction service (with its markers' sender) and the group service, KIP-890 verification.
"""
