"""protocol/message_specs.py: the stored specs make the same answer and request types as
kio's schemas do, and a stale or foreign file is not used."""

from __future__ import annotations

import marshal

import pytest

from protocol import answer_wire, message_specs
from protocol.request_wire import KAFKA_4_0


def _shape(kind: type, seen: set | None = None) -> tuple:
    """A type's fields, defaults and nested types, recursively, as comparable data."""
    seen = set() if seen is None else seen
    if kind.__name__ in seen:
        return (kind.__name__,)
    seen.add(kind.__name__)
    return (kind.__name__, kind._fields, tuple(sorted((k, repr(v)) for k, v in kind._field_defaults.items())),
            tuple(sorted((attr, _shape(inner, seen)) for attr, inner in kind._nested.items())))


@pytest.fixture
def stored_specs(tmp_path, monkeypatch):
    path = tmp_path / "message-specs.marshal"
    count = answer_wire.store_message_specs(path)
    monkeypatch.setattr(message_specs, "CACHE_FILE", path)
    monkeypatch.setattr(message_specs, "_specs", None)
    return path, count


def test_every_served_api_is_stored_in_both_directions(stored_specs):
    _, count = stored_specs
    assert count == 2 * len(KAFKA_4_0)
    for api_key in KAFKA_4_0:
        assert message_specs.stored("answer", api_key) is not None
        assert message_specs.stored("request", api_key) is not None


def test_types_from_stored_specs_are_the_types_made_from_kio(stored_specs):
    for api_key in KAFKA_4_0:
        for direction in ("answer", "request"):
            fresh = answer_wire.message_spec(api_key, direction)
            assert message_specs.stored(direction, api_key) == fresh  # marshal keeps every value as it was
            from_file = answer_wire._types_from_spec(message_specs.stored(direction, api_key), set())
            assert _shape(from_file) == _shape(answer_wire._types_from_spec(fresh, set()))


def test_a_default_struct_comes_back_as_a_value_of_its_type(stored_specs):
    produce = answer_wire._types_from_spec(message_specs.stored("answer", 0), set())
    partition = produce.PartitionProduceResponse(index=0, error_code=0, base_offset=5, record_errors=())
    assert isinstance(partition.current_leader, produce.LeaderIdAndEpoch)
    assert partition.current_leader == produce.LeaderIdAndEpoch()
    assert produce._nested["responses"] is produce.TopicProduceResponse


def test_a_uuid_default_comes_back_as_a_uuid():
    spec = ("M", (("M", (("topic_id", ("uuid", bytes(15) + b"\x01")),), ()),))
    assert answer_wire._types_from_spec(spec, set())().topic_id.int == 1


def test_a_stale_file_is_not_used(stored_specs, monkeypatch):
    path, _ = stored_specs
    fingerprint, specs = marshal.loads(path.read_bytes())
    path.write_bytes(marshal.dumps(((fingerprint[0] + 1, *fingerprint[1:]), specs)))
    assert message_specs.stored("answer", 3) is None
    monkeypatch.setattr(message_specs, "_specs", None)
    path.write_bytes(b"not marshal data")
    assert message_specs.stored("answer", 3) is None
    monkeypatch.setattr(message_specs, "_specs", None)
    path.unlink()
    assert message_specs.stored("answer", 3) is None
