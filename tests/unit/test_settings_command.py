"""`eosbroker settings`: every setting with its default, written as a server.properties
file writes it, so the output works as a --config file."""

from __future__ import annotations

from click.testing import CliRunner

from broker.commands import main
from broker.config import SETTINGS, BrokerConfig, parse_properties


def _output() -> str:
    result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code == 0, result.output
    return result.output


def test_values_are_written_as_kafka_config_files_write_them():
    values = parse_properties(_output())
    assert set(values) == set(SETTINGS)
    assert values["auto.create.topics.enable"] == "true" and values["allow.everyone.if.no.acl.found"] == "false"
    assert values["group.consumer.assignors"] == "uniform,range"
    assert not any(v in ("True", "False", "None") or v.startswith(("(", "[")) for v in values.values())


def test_the_output_read_back_as_a_config_file_gives_the_defaults(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(_output())
    loaded = BrokerConfig.load(path)
    assert dict(loaded.items()) == dict(BrokerConfig().items())


def test_descriptions_are_whole_sentences():
    own = _output().split("\n\n")[0]  # before the list of Kafka's other names
    comments = [line[2:] for line in own.splitlines() if line.startswith("#")]
    assert len(comments) == sum(1 for s in SETTINGS.values() if s.doc)
    for sentence in comments:
        assert sentence[0].isupper() or sentence[0].isdigit(), sentence
        assert sentence.endswith((".", "...")), sentence


def test_kafkas_other_names_are_listed_with_what_they_do():
    tail = _output().split("\n\n", 1)[1]
    in_effect = set(tail.split("These take effect:", 1)[1].split(".\n", 1)[0].replace("#", " ").replace(",", " ").split())
    assert {"advertised.listeners", "controller.listener.names", "inter.broker.listener.name",
            "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
            "sasl.oauthbearer.allow.unverified.audience", "sasl.oauthbearer.allow.unverified.issuer"} <= in_effect
    listed = tail.split("no effect in eosbroker:", 1)[1].replace("#", " ").replace(",", " ").split()
    assert {"num.network.threads", "log.dirs", "controller.quorum.voters"} <= set(listed)
    assert not set(listed) & (set(SETTINGS) | {"listeners", "log.retention.hours"})
