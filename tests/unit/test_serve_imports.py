"""What a single-node serve start loads: the follower Fetch request type (every Fetch
schema version) is built at the first follower fetch, not when the broker is imported."""

import subprocess
import sys


def test_importing_the_broker_process_does_not_load_fetch_request_schemas():
    probe = ("import sys, broker.process; "
             "print(sorted(m for m in sys.modules if m.startswith('kio.schema.fetch.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
