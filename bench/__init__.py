"""Side-by-side benchmarks: the same workloads against eosbroker and a peer broker (Tansu).

Run from the repository root: ``python -m bench --help``.
"""
