"""Kafka's ids for ACL resource types, pattern types, operations and permissions, and
the error a bad binding raises: shared by the authorizer (``broker.security.acls``, loaded at
start-up) and the bindings (``broker.security.acl_bindings``, loaded with the first ACL).
"""

# ResourceType, PatternType, AclOperation and AclPermissionType ids (Kafka's enums)
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION = 1, 2, 3, 4, 5, 6, 7, 8, 9
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT = (
    10, 11, 12, 13, 14, 15)
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"


class AclError(ValueError):
    pass
