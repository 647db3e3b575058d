"""Brokers with the authorizer on, and the ACLs a test starts from."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AclBinding, AclPermissionType, AdminClient, NewTopic, ResourcePatternType

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The authorizer on, and open while nothing restricts a resource: how ACLs are set up.
OPEN_AUTHORIZER = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}


def allow(rtype, name: str, operation, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    """ALLOW ``operation`` on a resource to every user from every host."""
    return AclBinding(rtype, name, pattern, "User:*", "*", operation, AclPermissionType.ALLOW)


def broker_with_acls(broker_factory, data_dir: Path, topics: list[str], grants: list[AclBinding],
                     settings: dict | None = None):
    """A broker whose authorizer allows only ``grants``, with ``topics`` (one partition each)
    created: they are set up on an open broker over the same data dir, then it stops.
    ``settings``: further broker settings of both."""
    open_broker = broker_factory({**OPEN_AUTHORIZER, **(settings or {})}, data_dir=data_dir)
    admin = AdminClient({"bootstrap.servers": open_broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(10)
    for f in admin.create_acls(grants).values():
        f.result(10)
    del admin  # destroyed before its broker stops, so it does not retry a closed port
    open_broker.stop()
    return broker_factory({"authorizer.class.name": STANDARD_AUTHORIZER, **(settings or {})}, data_dir=data_dir)
