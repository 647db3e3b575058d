"""The ``eosbroker`` program (the console script's entry, ``python -m broker.program``):
``[--log-level LEVEL] serve ...`` goes to broker.cli, without click; everything else (help,
the tools) to the click group of broker.commands.

The cyclic collector is off before broker.cli loads, so that loading it does not turn it
on again just before ``serve`` turns it off (see the top of broker.cli); ``run`` turns it
on for the other commands.
"""

import gc

gc.disable()

import sys  # noqa: E402  (after the collector is off)

from broker.cli import configure_logging, serve  # noqa: E402


def run(argv: list[str] | None = None) -> None:
    """``[--log-level LEVEL] serve ...`` without click; anything else to the click group."""
    argv = sys.argv[1:] if argv is None else list(argv)
    level, rest = "INFO", argv
    if rest[:1] == ["--log-level"] and len(rest) > 1:
        level, rest = rest[1], rest[2:]
    elif rest[:1] and rest[0].startswith("--log-level="):
        level, rest = rest[0].partition("=")[2], rest[1:]
    if rest[:1] != ["serve"]:
        gc.enable()  # off since this module loaded (see its top)
        from broker.commands import main as group

        group()
        return
    try:
        configure_logging(level)
    except ValueError as e:
        sys.exit(f"Error: --log-level: {e}")
    serve(rest[1:])


if __name__ == "__main__":
    run()
