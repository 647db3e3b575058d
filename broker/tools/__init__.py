"""Operator tools of the ``eosbroker`` command line: ``transactions`` (over the wire,
against any Kafka-compatible cluster) and ``dump-log`` (reads data files directly)."""
