"""Kafka 4.4's broker settings table and the run-time change rules built on it
(broker.kafka_settings); the answers themselves are compared with Kafka's in
tests/reference/test_admin_answers.py."""

from __future__ import annotations

import pytest

from broker.kafka_settings import KAFKA_BROKER_SETTINGS, KafkaSettingRefused, check_dynamic_change, kafka_setting


def test_the_table_knows_kafkas_settings_and_their_update_modes():
    assert len(KAFKA_BROKER_SETTINGS) > 350
    modes = {n: KAFKA_BROKER_SETTINGS[n].update_mode for n in (
        "sasl.kerberos.min.time.before.relogin", "num.io.threads", "log.dirs", "process.roles")}
    assert modes == {"sasl.kerberos.min.time.before.relogin": "per-broker", "num.io.threads": "cluster-wide",
                     "log.dirs": "read-only", "process.roles": "read-only"}
    assert kafka_setting("listener.name.internal.ssl.keystore.location").name == "ssl.keystore.location"
    assert kafka_setting("no.such.setting") is None


@pytest.mark.parametrize("values, per_broker, message", [
    ({"sasl.kerberos.min.time.before.relogin": "58000"}, True, None),
    ({"no.such.setting": "x"}, False, None),  # Kafka lets names it does not know through
    ({"num.io.threads": "4", "log.cleanup.policy": ""}, False, None),
    ({"sasl.kerberos.min.time.before.relogin": "58000"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "[sasl.kerberos.min.time.before.relogin]"),
    ({"log.dirs": "/x", "node.id": "2"}, True, "Cannot update these configs dynamically: [log.dirs, node.id]"),
    ({"ssl.keystore.location": "/x"}, True,
     "These security configs can be dynamically updated only per-listener using the listener prefix: "
     "[ssl.keystore.location]"),
    ({"listener.name.internal.ssl.keystore.location": "/x"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "[listener.name.internal.ssl.keystore.location]"),
    ({"log.retention.ms": "abc"}, True, "Invalid value abc for configuration log.retention.ms: Not a number of type LONG"),
    ({"num.io.threads": "0"}, True, "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
    ({"log.cleanup.policy": "delete,,compact"}, True, "Configuration 'log.cleanup.policy' values must not be empty."),
    ({"ssl.engine.factory.class": ""}, True,
     "Invalid value  for configuration ssl.engine.factory.class: Class  could not be found."),
])
def test_dynamic_changes_checked_as_kafka_checks_them(values, per_broker, message):
    if message is None:
        check_dynamic_change(values, per_broker)
    else:
        with pytest.raises(KafkaSettingRefused) as refused:
            check_dynamic_change(values, per_broker)
        assert str(refused.value) == message
