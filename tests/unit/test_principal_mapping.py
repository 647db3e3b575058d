"""ssl.principal.mapping.rules, parsed and applied as Kafka's SslPrincipalMapper does."""

import re

import pytest

from broker.security.principal_mapping import PrincipalMapper, PrincipalMappingError, parse_rules

DUKE = "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US"


@pytest.mark.parametrize("rules, subject, name", [
    ("DEFAULT", "CN=alice,OU=clients,O=eosbroker development", "CN=alice,OU=clients,O=eosbroker development"),
    ("", "CN=alice", None),  # no rules: nothing applies
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "CN=duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L", DUKE, "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U", DUKE, "DUKE@JAVASOFT"),
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L", DUKE, "duke"),
    # a pattern with commas, then the next rule
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, DEFAULT",
     DUKE, "duke@javasoft"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=x,OU=Other", "CN=x,OU=Other"),
    # an escaped slash in the replacement; $2 naming no group stays literal (one group here)
    (r"RULE:^CN=([^,]*).*$/users\/$1/", "CN=bob,O=x", "users/bob"),
    ("RULE:^CN=([^,]*).*$/$1$2/", "CN=bob,O=x", "bob$2"),
    ("RULE:^CN=([^,]*).*$/$10/", "CN=bob,O=x", "bob0"),  # $10 with one group: $1 then 0, as Java reads it
    ("RULE:^CN=(?P<user>[^,]*).*$/${user}/", "CN=carol,O=x", "carol"),
])
def test_rules_name_the_user(rules, subject, name):
    mapper = PrincipalMapper.from_setting(rules)
    if name is None:
        with pytest.raises(PrincipalMappingError, match="No rules apply to CN=alice"):
            mapper.name(subject)
    else:
        assert mapper.name(subject) == name


def test_first_matching_rule_wins_and_none_matching_is_an_error():
    mapper = PrincipalMapper.from_setting("RULE:^CN=(admin),.*$/root/, RULE:^CN=([^,]*),OU=clients,.*$/$1/")
    assert mapper.name("CN=admin,OU=clients,O=x") == "root"
    assert mapper.name("CN=alice,OU=clients,O=x") == "alice"
    with pytest.raises(PrincipalMappingError, match=r"No rules apply to CN=alice,OU=staff,O=x, rules \[RULE:"):
        mapper.name("CN=alice,OU=staff,O=x")


@pytest.mark.parametrize("rules, unmatched", [
    ("default", "default"),
    ("DEFAULT/L", "/L"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/LU", "U"),
    # without its closing slash the rule is cut at its first comma, as Kafka's splitter cuts it
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1", "RULE:^CN=(.*?)"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, bogus", "bogus"),
])
def test_invalid_rules_are_refused_with_kafkas_message(rules, unmatched):
    with pytest.raises(PrincipalMappingError, match="Invalid rule: `.*`, unmatched substring: `" + re.escape(unmatched)):
        parse_rules(rules)


def test_empty_rules_between_commas_are_ignored():
    assert [r.text() for r in parse_rules("DEFAULT, ,DEFAULT")] == ["DEFAULT", "DEFAULT"]
