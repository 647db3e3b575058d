"""The ``eosbroker`` console script's entry point: ``run`` of broker.cli, loaded with the
cyclic collector off, so that loading broker.cli does not turn it on again just before
``serve`` turns it off (see the top of broker.cli)."""

import gc

gc.disable()

from broker.cli import run  # noqa: E402  (after the collector is off)

__all__ = ["run"]
