"""Transaction coordinator: metadata, state machine, and the __transaction_state codec."""

from coordinator.transaction.coordinator import (
    ProducerIdTaken,
    SendMarkers,
    TransactionConfig,
    TransactionCoordinator,
    TransactionLogRecord,
)
from coordinator.transaction.metadata import TransactionMetadata, TransactionState

__all__ = [
    "ProducerIdTaken",
    "SendMarkers",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionLogRecord",
    "TransactionMetadata",
    "TransactionState",
]
