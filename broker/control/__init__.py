"""The control of a running cluster: the operations table, the control service, the
admin HTTP server and its routes, the console, ``eosbroker ctl``, /metrics, the
Python API.
"""
