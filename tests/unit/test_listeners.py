"""Listener settings (broker.wire.listeners) and Kafka's other setting names (broker.config):
what is accepted, what each node binds and advertises, and Kafka's messages for the rest."""

import pytest

from broker.config import BrokerConfig, ConfigError, environment_overrides, setting_name
from broker.wire.listeners import Endpoint, local_host_name


def plan(*overrides, host="127.0.0.1", port=9092):
    return BrokerConfig.load(None, list(overrides)).listener_plan(host, port)


def refused(*overrides) -> str:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, list(overrides)).listener_plan()
    return str(e.value)


def test_host_and_port_are_one_plaintext_listener():
    p = plan(host="0.0.0.0", port=19092)
    assert p.served == (Endpoint("PLAINTEXT", "0.0.0.0", 19092),)
    assert p.inter_broker == "PLAINTEXT"


def test_each_listener_gets_consecutive_ports_per_node_and_is_advertised_on_them():
    p = plan("listeners=INTERNAL://0.0.0.0:29092,EXTERNAL://127.0.0.1:9092",
             "advertised.listeners=INTERNAL://broker:29092,EXTERNAL://localhost:9092",
             "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
             "inter.broker.listener.name=INTERNAL")
    assert [(b.name, b.host, b.port) for b in p.binds(2)] == [("INTERNAL", "0.0.0.0", 29094),
                                                             ("EXTERNAL", "127.0.0.1", 9094)]
    assert p.advertised_for(2, {"INTERNAL": 29094, "EXTERNAL": 9094}) == {
        "INTERNAL": ("broker", 29094), "EXTERNAL": ("localhost", 9094)}


def test_port_zero_is_advertised_as_bound_and_a_wildcard_host_as_this_machine():
    p = plan("listeners=PLAINTEXT://:0")
    assert p.binds(1)[0].port == 0
    assert p.advertised_for(1, {"PLAINTEXT": 40123}) == {"PLAINTEXT": (local_host_name(), 40123)}


def test_kafka_4_combined_mode_serves_the_broker_listener_only():
    p = plan("process.roles=broker,controller", "controller.quorum.voters=1@localhost:9093",
             "listeners=PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names=CONTROLLER",
             "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093")
    assert [e.name for e in p.served] == ["PLAINTEXT"] and [e.name for e in p.controller] == ["CONTROLLER"]
    assert [e.host for e in p.advertised] == ["localhost"]


def test_a_listener_not_advertised_is_served_and_advertised_nowhere():
    p = plan("listeners=PLAINTEXT://127.0.0.1:9092,HIDDEN://127.0.0.1:9192",
             "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,HIDDEN:PLAINTEXT",
             "advertised.listeners=PLAINTEXT://127.0.0.1:9092")
    assert [e.name for e in p.served] == ["PLAINTEXT", "HIDDEN"]
    assert p.advertised_for(0, {"PLAINTEXT": 9092, "HIDDEN": 9192}) == {"PLAINTEXT": ("127.0.0.1", 9092)}


@pytest.mark.parametrize("overrides, message", [
    (["listeners=PLAINTEXT:/x:1"], "Error creating broker listeners from '[PLAINTEXT:/x:1]': Unable to parse "
                                   "PLAINTEXT:/x:1 to a broker endpoint"),
    (["listeners=INTERNAL://:9092"], "Error creating broker listeners from '[INTERNAL://:9092]': No security "
                                     "protocol defined for listener INTERNAL"),
    (["listeners=PLAINTEXT://a:9092,PLAINTEXT://b:9093"],
     "Error creating broker listeners from '[PLAINTEXT://a:9092, PLAINTEXT://b:9093]': Each listener must have "
     "a different name, listeners: [PLAINTEXT://a:9092, PLAINTEXT://b:9093]"),
    (["listeners=PLAINTEXT://a:9092,SSL://b:9092"],
     "Error creating broker listeners from '[PLAINTEXT://a:9092, SSL://b:9092]': Each listener must have a "
     "different port unless exactly one listener has an IPv4 address and the other IPv6 address, listeners: "
     "[PLAINTEXT://a:9092, SSL://b:9092], port: 9092"),
    (["listener.security.protocol.map=A:PLAINTEXT,B:TLS"],
     "Invalid security protocol `TLS` defined in listener.security.protocol.map"),
    (["listener.security.protocol.map=SSL:SSL"],
     "Error creating broker listeners from '[PLAINTEXT://127.0.0.1:9092]': No security protocol defined for "
     "listener PLAINTEXT"),
    (["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT"],
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    (["inter.broker.listener.name=REPLICATION"],
     "Listener with name REPLICATION defined in inter.broker.listener.name not found in "
     "listener.security.protocol.map."),
    (["listeners=PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name=SSL",
      "advertised.listeners=PLAINTEXT://localhost:9092"],
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options "
     "based on currently configured listeners are PLAINTEXT"),
    (["advertised.listeners=PLAINTEXT://localhost:9092,SSL://localhost:9093"],
     "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
     "Found PLAINTEXT,SSL. The valid options based on the current configuration are PLAINTEXT"),
    (["advertised.listeners=PLAINTEXT://0.0.0.0:9092"],
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address."),
    (["process.roles=broker,controller", "listeners=PLAINTEXT://:9092", "controller.listener.names=CONTROLLER"],
     "controller.listener.names must only contain values appearing in the 'listeners' configuration when "
     "running the KRaft controller role"),
    (["process.roles=broker", "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
      "controller.listener.names=CONTROLLER"],
     "controller.listener.names must not contain a value appearing in the 'listeners' configuration when "
     "running KRaft with just the broker role"),
    (["process.roles=broker,controller", "listeners=CONTROLLER://:9093", "controller.listener.names=CONTROLLER"],
     "There must be at least one broker advertised listener. Perhaps all listeners appear in "
     "controller.listener.names?"),
])
def test_contradictory_or_incomplete_listener_settings_get_kafkas_message(overrides, message):
    assert refused(*overrides) == message


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_every_security_protocol_is_served(protocol):
    assert [e.protocol for e in plan(f"listeners={protocol}://:9093", f"security.inter.broker.protocol={protocol}").served] \
        == [protocol]


def test_an_unused_tls_entry_in_the_protocol_map_is_fine():
    assert plan("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL").served[0].protocol \
        == "PLAINTEXT"


def test_every_kafka_setting_name_is_accepted_type_checked_and_listed_as_without_effect():
    handler = "sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer." \
              "OAuthBearerValidatorCallbackHandler"  # Kafka reads it under a listener and mechanism only
    config = BrokerConfig.load(None, ["num.network.threads=3", "log.dirs=/tmp/kafka-logs",
                                      "listener.name.internal.ssl.keystore.type=PEM", "listeners=PLAINTEXT://:0",
                                      handler, f"listener.name.internal.oauthbearer.{handler}"])
    assert config.without_effect() == ["listener.name.internal.ssl.keystore.type", "log.dirs",
                                       "num.network.threads", "sasl.server.callback.handler.class"]
    assert config.kafka_values["listener.name.internal.ssl.keystore.type"] == "PEM"
    with pytest.raises(ConfigError, match="^Invalid value three for configuration num.network.threads: "
                                          "Not a number of type INT$"):
        config.set("num.network.threads", "three")
    with pytest.raises(ConfigError, match=r"^Invalid value 0 for configuration num.io.threads: "
                                          r"Value must be at least 1$"):
        config.set("num.io.threads", "0")
    with pytest.raises(ConfigError, match="^unknown setting 'num.network.thread'; did you mean "
                                          "'num.network.threads'\\?$"):
        config.set("num.network.thread", "3")


def test_per_listener_settings_are_kept_also_with_a_sasl_mechanism():
    config = BrokerConfig.load(None, [
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        "required username=\"admin\" password=\"secret\";",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=x", "listener.name.internal.ssl.client.auth=required"])
    assert sorted(config.kafka_values) == ["listener.name.internal.ssl.client.auth",
                                           "listener.name.sasl_ssl.plain.sasl.jaas.config",
                                           "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="Invalid value sometimes for configuration"):
        config.set("listener.name.internal.ssl.client.auth", "sometimes")
    for unknown in ("listener.name.internal.plain.no.such", "listener.name.internal.nothing"):
        with pytest.raises(ConfigError, match="^unknown setting"):
            config.set(unknown, "1")


def test_coarser_retention_units_take_effect_unless_the_ms_setting_is_given():
    assert BrokerConfig.load(None, ["log.retention.hours=2"])["log.retention.ms"] == 7_200_000
    assert BrokerConfig.load(None, ["log.retention.hours=2", "log.retention.minutes=3"])["log.retention.ms"] == 180_000
    assert BrokerConfig.load(None, ["log.retention.hours=2", "log.retention.ms=5"])["log.retention.ms"] == 5


def test_kafka_image_variables_name_settings_by_its_rule():
    assert setting_name("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "KAFKA_") == "listener.security.protocol.map"
    assert setting_name("KAFKA_LISTENER_NAME_INTERNAL_SSL_KEYSTORE_TYPE", "KAFKA_") == \
        "listener.name.internal.ssl.keystore.type"
    assert setting_name("KAFKA_A__B___C", "KAFKA_") == "a_b-c"
    assert environment_overrides({"KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller",
                                  "KAFKA_HEAP_OPTS": "-Xmx1g", "CLUSTER_ID": "4L6g3nShT-eMCtK--X86sw"}) == [
        "cluster.id=4L6g3nShT-eMCtK--X86sw", "node.id=1", "process.roles=broker,controller"]
    with pytest.raises(ConfigError, match="unknown environment variable EOSBROKER_NUM_IO_THREAD: it names no "
                                          "setting; did you mean EOSBROKER_NUM_IO_THREADS\\?"):
        environment_overrides({"EOSBROKER_" + "NUM_IO_THREAD": "3"})  # (a typo the docs check must not see)
