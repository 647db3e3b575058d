"""ACLs and an authorizer with the rules of Kafka's StandardAuthorizer.

Bindings are kept in ``meta/acls.json``. The authorizer is on when
``authorizer.class.name`` is set (any non-empty value, as Kafka's name for
StandardAuthorizer); then every request is checked: DENY beats ALLOW, ALL covers every
operation, READ/WRITE/DELETE/ALTER imply DESCRIBE and ALTER_CONFIGS implies
DESCRIBE_CONFIGS, ``super.users`` pass every check, and a resource without any ACL is
open only with ``allow.everyone.if.no.acl.found``. A client is the principal its
connection authenticated as (``User:ANONYMOUS`` without TLS client auth or SASL), from its address.
"""

from __future__ import annotations

import logging

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.security.acl_ids import (  # the handlers import the ids they check from here
    TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, LITERAL, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, TWO_PHASE_COMMIT, DENY, ALLOW, CLUSTER_NAME, WILDCARD,
    CREATE_TOKENS, DESCRIBE_TOKENS, DELEGATION_TOKEN, USER,
)
from broker.log.files import read_json, write_json

if TYPE_CHECKING:  # loaded with the first ACL request or stored ACL file (broker.security.acl_bindings)
    from broker.security.acl_bindings import AclBinding, AclFilter

ANONYMOUS = "User:ANONYMOUS"
log = logging.getLogger(__name__)
# Kafka's names, as its authorizer log lines write them
_OPERATION_NAMES = {ALL: "ALL", READ: "READ", WRITE: "WRITE", CREATE: "CREATE", DELETE: "DELETE", ALTER: "ALTER",
                    DESCRIBE: "DESCRIBE", CLUSTER_ACTION: "CLUSTER_ACTION", DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
                    ALTER_CONFIGS: "ALTER_CONFIGS", IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE",
                    CREATE_TOKENS: "CREATE_TOKENS", DESCRIBE_TOKENS: "DESCRIBE_TOKENS",
                    TWO_PHASE_COMMIT: "TWO_PHASE_COMMIT"}
_RESOURCE_NAMES = {TOPIC: "Topic", GROUP: "Group", CLUSTER: "Cluster", TRANSACTIONAL_ID: "TransactionalId",
                   DELEGATION_TOKEN: "DelegationToken", USER: "User"}
METADATA = 3  # its topic checks filter what a client is shown: Kafka logs those denials at debug only
_IMPLY_DESCRIBE = {READ, WRITE, DELETE, ALTER}
# Operations that exist per resource type, for authorized-operations bit sets.
OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    CLUSTER: (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE),
    TRANSACTIONAL_ID: (WRITE, DESCRIBE, TWO_PHASE_COMMIT),
}


class Authorizer:
    def __init__(self, meta_dir: Path, enabled: bool, super_users: str = "",
                 allow_if_no_acl: bool = False) -> None:
        self._path = Path(meta_dir) / "acls.json"
        self.enabled = enabled
        self.super_users = {u.strip() for u in super_users.split(";") if u.strip()}
        self.allow_if_no_acl = allow_if_no_acl
        self.bindings: list[AclBinding] = []
        if self._path.exists():
            from broker.security.acl_bindings import AclBinding

            self.bindings = [AclBinding(**b) for b in read_json(self._path)]

    # -- the ACL APIs -----------------------------------------------------------------------

    def create(self, bindings: list[AclBinding]) -> None:
        for b in bindings:
            if b not in self.bindings:
                self.bindings.append(b)
        self._save()

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self.bindings if f.matches(b)]

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        deleted = [[b for b in self.bindings if f.matches(b)] for f in filters]
        gone = {b for group in deleted for b in group}
        if gone:
            self.bindings = [b for b in self.bindings if b not in gone]
            self._save()
        return deleted

    # -- authorization ----------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        applicable = [b for b in self.bindings if b.resource_type == resource_type and _covers(b, name)]
        if not applicable:
            return self.allow_if_no_acl
        mine = [b for b in applicable if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)]
        if any(b.permission_type == DENY and b.operation in (operation, ALL) for b in mine):
            return False
        allowed = {operation, ALL}
        if operation == DESCRIBE:
            allowed |= _IMPLY_DESCRIBE
        elif operation == DESCRIBE_CONFIGS:
            allowed.add(ALTER_CONFIGS)
        return any(b.permission_type == ALLOW and b.operation in allowed for b in mine)

    def allows_some(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Kafka's authorizeByResourceType, simplified: some ALLOW binding of the type
        grants the operation (idempotent producers may write with WRITE on any topic)."""
        if not self.enabled or principal in self.super_users:
            return True
        return any(b.resource_type == resource_type and b.permission_type == ALLOW
                   and b.operation in (operation, ALL) and b.principal in (principal, "User:*")
                   and b.host in (host, WILDCARD) for b in self.bindings)

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> int:
        """The bit set KIP-430 answers: bit n set when operation n is allowed."""
        bits = 0
        for op in OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self._path, [asdict(b) for b in self.bindings], indent=1)


def _covers(b: AclBinding, name: str) -> bool:
    if b.pattern_type == LITERAL:
        return b.resource_name in (name, WILDCARD)
    return name.startswith(b.resource_name)


def authorized(ctx, operation: int, resource_type: int, name: str, log_denial: bool = True) -> bool:
    """The authorizer's answer for the request's client, its denial logged as Kafka logs
    it. Asked only with the authorizer on, for a client's request
    (``RequestContext.allowed``, broker/wire/server.py, passes every other)."""
    host = ctx.connection.peer.rsplit(":", 1)[0]
    if ctx.broker.authorizer.authorize(ctx.connection.principal, host, operation, resource_type, name):
        return True
    if log_denial:
        _log_denial(ctx, operation, resource_type, name, host)
    return False


def _log_denial(ctx, operation: int, resource_type: int, name: str, host: str) -> None:
    from protocol.request_wire import api_name

    log.log(logging.DEBUG if ctx.header.api_key == METADATA else logging.INFO,
            "Principal = %s is Denied operation = %s from host = %s on resource = %s:%s for request = %s",
            ctx.connection.principal, _OPERATION_NAMES.get(operation, operation), host,
            _RESOURCE_NAMES.get(resource_type, resource_type), name, api_name(ctx.header.api_key))


def may_write_idempotently(ctx) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (Kafka 3+)."""
    host = ctx.connection.peer.rsplit(":", 1)[0]
    authorizer = ctx.broker.authorizer
    if (ctx.allowed(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, log_denial=False)
            or authorizer.allows_some(ctx.connection.principal, host, WRITE, TOPIC)):
        return True
    _log_denial(ctx, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, host)
    return False


def authorized_operations(ctx, resource_type: int, name: str) -> int:
    """KIP-430's bit set for the request's client (every operation when ACLs are off)."""
    host = ctx.connection.peer.rsplit(":", 1)[0]
    return ctx.broker.authorizer.authorized_operations(ctx.connection.principal, host, resource_type, name)


GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed
TRANSACTIONAL_ID_DENIED = ErrorCode.transactional_id_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
# Kafka's default messages (Errors.message()), which its error responses carry
DENIED_MESSAGES = {TOPIC_DENIED: "Topic authorization failed.", GROUP_DENIED: "Group authorization failed.",
                   CLUSTER_DENIED: "Cluster authorization failed.",
                   TRANSACTIONAL_ID_DENIED: "Transactional Id authorization failed."}

NOT_REQUESTED = -2147483648  # Int32.MIN: authorized operations were not asked for
