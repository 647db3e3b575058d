"""Producer ids that are never handed out twice, across restarts and crashes.

Like Kafka's block allocation (ProducerIdManager), ids are reserved a block at a
time: the end of the block is made durable before any id of it is handed out, and
the next block is reserved as soon as one is used up.
After a restart, crash or clean, allocation resumes at the end of the last reserved
block; ids of a block that were not handed out are skipped, never repeated.

The file holds one decimal integer, the end (exclusive) of the reserved block.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.files import replace_atomically

MAX_PRODUCER_ID = 0x7FFFFFFFFFFFFFFF


class ProducerIdsExhausted(RuntimeError):
    pass


class ProducerIdAllocator:
    def __init__(self, path: Path, block_size: int = 1000) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.path = Path(path)
        self.block_size = block_size
        self.blocks_reserved = 0  # blocks reserved by this instance (file writes)
        self._block_end = self._read_block_end()
        self._next = self._block_end

    def _read_block_end(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        try:
            value = int(text.strip())
        except ValueError:
            # Guessing a value could repeat ids: refuse to start instead.
            raise ValueError(f"{self.path}: unreadable producer id block end {text[:40]!r}") from None
        if value < 0:
            raise ValueError(f"{self.path}: negative producer id block end {value}")
        return value

    def _reserve_block(self) -> None:
        end = self._block_end + self.block_size
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhausted(f"producer ids exhausted at {self._block_end}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(self.path, f"{end}\n".encode("ascii"), sync_dir=True)
        self._block_end = end
        self.blocks_reserved += 1

    def peek(self) -> int:
        """The id the next producer gets (the first block is reserved on first use)."""
        if self._next >= self._block_end:
            self._reserve_block()
        return self._next

    def taken(self, producer_id: int) -> None:
        """``producer_id`` (the one ``peek`` gave) is handed out. When that used up the
        block, the next one is reserved now: the transaction coordinator reports ids as
        an effect of its InitProducerId, so this is where its file I/O happens."""
        if producer_id != self._next:
            raise ValueError(f"producer id {producer_id} taken, but {self._next} was next")
        self._next += 1
        if self._next >= self._block_end:
            self._reserve_block()

    def next_producer_id(self) -> int:
        """Takes an id at once (an idempotent producer's InitProducerId)."""
        producer_id = self.peek()
        self.taken(producer_id)
        return producer_id
