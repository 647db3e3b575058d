"""ACL bindings and filters: the values CreateAcls, DescribeAcls and DeleteAcls carry
and ``meta/acls.json`` keeps, with the checks Kafka makes on them (``broker.security.acls`` holds
the authorizer, ``broker.security.acl_ids`` the resource, operation and permission ids).

A module of its own, loaded with the first ACL request or a stored ACL file: a broker
without ACLs does not build these classes at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.security.acl_ids import (
    ALL, ALLOW, ANY_OP, ANY_PATTERN, ANY_PERMISSION, ANY_RESOURCE, CLUSTER, CLUSTER_NAME, DELEGATION_TOKEN, DENY,
    GROUP, LITERAL, MATCH, PREFIXED, TOPIC, TRANSACTIONAL_ID, TWO_PHASE_COMMIT, USER, WILDCARD, AclError,
)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who may (or may not) do what on which resources."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which ACLs a DescribeAcls or DeleteAcls filter selects; None matches any value."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def validate(self) -> None:
        if self.resource_type < ANY_RESOURCE or self.resource_type > USER:
            raise AclError(f"Invalid resource type: {self.resource_type}")
        if self.pattern_type < ANY_PATTERN or self.pattern_type > PREFIXED:
            raise AclError(f"Invalid pattern type: {self.pattern_type}")
        if self.operation < ANY_OP or self.operation > TWO_PHASE_COMMIT:
            raise AclError(f"Invalid operation: {self.operation}")
        if self.permission_type < ANY_PERMISSION or self.permission_type > ALLOW:
            raise AclError(f"Invalid permission type: {self.permission_type}")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY_RESOURCE and self.resource_type != b.resource_type:
            return False
        if not self._matches_pattern(b):
            return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == ANY_OP or self.operation == b.operation)
                and (self.permission_type == ANY_PERMISSION or self.permission_type == b.permission_type))

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.pattern_type == MATCH:
            # every binding that applies to a resource of this name
            if self.resource_name is None:
                return True
            if b.pattern_type == LITERAL:
                return b.resource_name in (self.resource_name, WILDCARD)
            return self.resource_name.startswith(b.resource_name)
        if self.pattern_type != ANY_PATTERN and self.pattern_type != b.pattern_type:
            return False
        return self.resource_name is None or self.resource_name == b.resource_name


def validate_new(b: AclBinding) -> None:
    """The checks Kafka's AclControlManager makes on a new binding."""
    if b.resource_type not in (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER):
        raise AclError(f"Invalid resourceType {b.resource_type}")
    if b.pattern_type not in (LITERAL, PREFIXED):
        raise AclError(f"Invalid patternType {b.pattern_type}")
    if b.operation < ALL or b.operation > TWO_PHASE_COMMIT:
        raise AclError(f"Invalid operation {b.operation}")
    if b.permission_type not in (DENY, ALLOW):
        raise AclError(f"Invalid permissionType {b.permission_type}")
    if not b.resource_name:
        raise AclError("Resource name should not be empty")
    if b.resource_type == CLUSTER and (b.pattern_type != LITERAL or b.resource_name != CLUSTER_NAME):
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if b.host is None or b.host == "":
        raise AclError("Invalid host")
    kind, sep, name = (b.principal or "").partition(":")
    if not sep or not kind or not name:
        raise AclError(f"Could not parse principal from `{b.principal}` (no colon is present separating the "
                       "principal type from name)")
