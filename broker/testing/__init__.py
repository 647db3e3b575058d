"""Testing with eosbroker: brokers a test starts and owns, and the pytest plugin
(``broker.testing.plugin``, registered as the ``eosbroker`` pytest11 entry point)."""

from broker.testing.helpers import (
    ConsumedRecord,
    assert_topic_holds,
    create_topic,
    read_committed,
    topic_difference,
    wait_until,
)
from broker.testing.in_process import InProcessBroker
from broker.testing.process import BrokerProcess
from broker.testing.security import SecuredBroker, Security

__all__ = [
    "BrokerProcess", "ConsumedRecord", "InProcessBroker", "SecuredBroker", "Security", "assert_topic_holds",
    "create_topic", "read_committed", "topic_difference", "wait_until",
]
