"""ACL bindings load with the first ACL request or stored ACL file (broker.security.acl_bindings),
not with the authorizer: a fresh process given a stored file reads and enforces it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from broker.security.acl_bindings import AclBinding, AclFilter
from broker.security.acl_ids import ALLOW, ANY_OP, ANY_PERMISSION, ANY_RESOURCE, DENY, LITERAL, MATCH, PREFIXED, READ, TOPIC, WRITE
from broker.security.acls import Authorizer

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_process_reads_and_enforces_stored_bindings(tmp_path):
    stored = Authorizer(tmp_path, True)
    stored.create([AclBinding(TOPIC, "orders", LITERAL, "User:*", "*", READ, ALLOW),
                   AclBinding(TOPIC, "orders.", PREFIXED, "User:ANONYMOUS", "*", WRITE, DENY)])
    script = f"""
import sys
from broker.security import acls
assert "broker.security.acl_bindings" not in sys.modules
empty = acls.Authorizer({str(tmp_path / "none")!r}, True)
assert empty.bindings == [] and "broker.security.acl_bindings" not in sys.modules
authorizer = acls.Authorizer({str(tmp_path)!r}, True)
assert "broker.security.acl_bindings" in sys.modules and len(authorizer.bindings) == 2
assert authorizer.authorize("User:ANONYMOUS", "127.0.0.1", acls.READ, acls.TOPIC, "orders")
assert not authorizer.authorize("User:ANONYMOUS", "127.0.0.1", acls.WRITE, acls.TOPIC, "orders.eu")
assert not authorizer.authorize("User:ANONYMOUS", "127.0.0.1", acls.WRITE, acls.TOPIC, "orders")  # READ only
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_filters_select_as_describe_and_delete_acls_do(tmp_path):
    authorizer = Authorizer(tmp_path, True)
    literal = AclBinding(TOPIC, "orders", LITERAL, "User:*", "*", READ, ALLOW)
    prefixed = AclBinding(TOPIC, "ord", PREFIXED, "User:a", "*", WRITE, DENY)
    authorizer.create([literal, prefixed, literal])  # a duplicate is kept once
    assert authorizer.bindings == [literal, prefixed]
    anything = AclFilter(ANY_RESOURCE, None, 1, None, None, ANY_OP, ANY_PERMISSION)
    assert authorizer.describe(anything) == [literal, prefixed]
    applying = AclFilter(TOPIC, "orders", MATCH, None, None, ANY_OP, ANY_PERMISSION)
    assert authorizer.describe(applying) == [literal, prefixed]
    assert authorizer.delete([AclFilter(TOPIC, "ord", PREFIXED, None, None, ANY_OP, ANY_PERMISSION)]) == [[prefixed]]
    assert Authorizer(tmp_path, True).bindings == [literal]  # what the file now keeps
