"""The integration tests' broker handles come from the pytest plugin the package ships."""

from broker.testing import BrokerProcess, InProcessBroker, wait_until
from broker.testing.helpers import HOST

__all__ = ["HOST", "BrokerProcess", "InProcessBroker", "wait_until"]
