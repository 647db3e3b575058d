"""What the container image relies on: `eosbroker healthcheck` (a Kafka ApiVersions
round trip) and `serve` taking its address and settings from environment variables."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from click.testing import CliRunner

from broker.commands import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthcheck(shared_broker):
    ok = CliRunner().invoke(main, ["healthcheck", "--bootstrap-server", shared_broker.bootstrap_servers])
    assert ok.exit_code == 0 and ok.output.startswith(f"healthy: {shared_broker.bootstrap_servers} offers ")
    from_env = CliRunner(env={"EOSBROKER_HOST": "0.0.0.0", "EOSBROKER_PORT": str(shared_broker.port)}).invoke(
        main, ["healthcheck"])
    assert from_env.exit_code == 0 and f"healthy: 127.0.0.1:{shared_broker.port}" in from_env.output


def test_healthcheck_failures(tmp_path):
    port = _closed_port()
    down = CliRunner().invoke(main, ["healthcheck", "--bootstrap-server", f"127.0.0.1:{port}"])
    assert down.exit_code == 1 and f"unhealthy: 127.0.0.1:{port}" in down.output
    bad = CliRunner().invoke(main, ["healthcheck", "--bootstrap-server", "nonsense"])
    assert bad.exit_code == 2 and "expected HOST:PORT, got 'nonsense'" in bad.output
    # a listener that accepts but never answers is unhealthy too
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        mute = CliRunner().invoke(main, ["healthcheck", "--bootstrap-server",
                                         f"127.0.0.1:{silent.getsockname()[1]}", "--timeout", "0.5"])
    assert mute.exit_code == 1 and "unhealthy" in mute.output


def _serve(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "broker.program", "serve"], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_takes_its_address_and_settings_from_the_environment(tmp_path):
    proc = _serve({"EOSBROKER_PORT": "0", "EOSBROKER_DATA_DIR": str(tmp_path / "data"),
                   "EOSBROKER_NUM_PARTITIONS": "3", "KAFKA_LOG_RETENTION_MS": "60000",
                   "KAFKA_HEAP_OPTS": "-Xmx1g"})  # not a setting: left alone
    try:
        line = proc.stdout.readline()
        assert line.startswith("eosbroker listening on 127.0.0.1:"), proc.stderr.read()
        bootstrap = line.split()[-1]
        r = CliRunner().invoke(main, ["topics", "--bootstrap-server", bootstrap, "create", "--topic", "t"])
        assert r.exit_code == 0, r.output
        d = CliRunner().invoke(main, ["topics", "--bootstrap-server", bootstrap, "describe", "--topic", "t"])
        assert "\tPartitionCount: 3\t" in d.output
        assert (tmp_path / "data" / "t-2").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        proc.stdout.close()
        proc.stderr.close()


def test_a_bad_setting_in_the_environment_is_refused(tmp_path):
    proc = _serve({"EOSBROKER_PORT": "0", "EOSBROKER_DATA_DIR": str(tmp_path / "data"),
                   "EOSBROKER_NUM_PARTITIONS": "many"})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "bad value for num.partitions: 'many'" in err


def test_the_console_script_runs_the_tools_with_the_collector_on():
    # its entry (broker.program) loads broker.cli with the cyclic collector off; run turns it on
    code = ("import atexit, gc; atexit.register(lambda: print('collector on:', gc.isenabled())); "
            "from broker.program import run; run()")
    done = subprocess.run([sys.executable, "-c", code, "settings"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "log.retention.ms=" in done.stdout and done.stdout.rstrip().endswith("collector on: True")
