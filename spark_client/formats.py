"""Value (and key) encodings of the sink: raw bytes/strings, JSON and protobuf from structs.

A struct column arrives as a dict (Arrow) or a Row; both are turned into a message
here. Protobuf messages are built from a descriptor file (a FileDescriptorSet, as
``protoc --include_imports --descriptor_set_out`` writes it) and a message name,
through the protobuf package's descriptor_pool and message_factory: no generated
code is needed on the executors.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

RAW = "raw"
JSON = "json"
PROTOBUF = "protobuf"
FORMATS = (RAW, JSON, PROTOBUF)

Encoder = Callable[[Any], "bytes | None"]


def _as_dict(value: Any) -> Any:
    """Rows (and nested Rows) as plain dicts; other values unchanged."""
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    return value


def encode_raw(value: Any) -> bytes | None:
    """What Spark's Kafka sink accepts for key and value: binary or string (UTF-8)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a raw key or value must be binary or string, not {type(value).__name__}")


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def encode_json(value: Any) -> bytes | None:
    if value is None:
        return None
    return json.dumps(_as_dict(value), separators=(",", ":"), default=_json_default,
                      ensure_ascii=False).encode("utf-8")


# -- protobuf ------------------------------------------------------------------------


@cache
def message_class(descriptor_file: str, message_name: str) -> type:
    """The message class for ``message_name`` from a FileDescriptorSet file."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    with open(descriptor_file, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    pool = descriptor_pool.DescriptorPool()
    known = {f.name for f in files}
    default = descriptor_pool.Default()
    for f in files:
        for dep in f.dependency:  # well-known types the set does not include
            if dep not in known:
                try:
                    pool.AddSerializedFile(default.FindFileByName(dep).serialized_pb)
                except KeyError as e:
                    raise ValueError(f"{descriptor_file}: {f.name} imports {dep}, which the descriptor set "
                                     "does not include (use protoc --include_imports)") from e
                known.add(dep)
        pool.Add(f)
    try:
        descriptor = pool.FindMessageTypeByName(message_name)
    except KeyError as e:
        raise ValueError(f"{descriptor_file} has no message {message_name!r}") from e
    return message_factory.GetMessageClass(descriptor)


def _is_map(field) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _scalar(field, value: Any) -> Any:
    if field.enum_type is not None and isinstance(value, str):
        try:
            return field.enum_type.values_by_name[value].number
        except KeyError as e:
            raise ValueError(f"{field.full_name}: no enum value {value!r}") from e
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _set_message(target, value: Any) -> None:
    full_name = target.DESCRIPTOR.full_name
    if full_name == "google.protobuf.Timestamp" and isinstance(value, datetime.datetime):
        target.FromDatetime(value)
        return
    fill_message(target, _as_dict(value))


def fill_message(message, data: Mapping[str, Any]) -> None:
    """Sets ``message``'s fields from a dict with the proto field names; None leaves a field unset."""
    fields = message.DESCRIPTOR.fields_by_name
    for name, value in data.items():
        if value is None:
            continue
        field = fields.get(name)
        if field is None:
            raise ValueError(f"{message.DESCRIPTOR.full_name} has no field {name!r}")
        target = getattr(message, name)
        if _is_map(field):
            items = value.items() if isinstance(value, Mapping) else value  # Arrow maps are pair lists
            value_field = field.message_type.fields_by_name["value"]
            for k, v in items:
                if value_field.message_type is not None:
                    _set_message(target[k], v)
                else:
                    target[k] = _scalar(value_field, v)
        elif field.is_repeated:
            for item in value:
                if field.message_type is not None:
                    _set_message(target.add(), item)
                else:
                    target.append(_scalar(field, item))
        elif field.message_type is not None:
            _set_message(target, value)
        else:
            setattr(message, name, _scalar(field, value))


def protobuf_encoder(descriptor_file: str, message_name: str) -> Encoder:
    cls = message_class(descriptor_file, message_name)

    def encode(value: Any) -> bytes | None:
        if value is None:
            return None
        message = cls()
        fill_message(message, _as_dict(value))
        return message.SerializeToString()

    return encode


def protobuf_decoder(descriptor_file: str, message_name: str) -> Callable[[bytes], dict]:
    """bytes -> dict with proto field names (for reading a topic back)."""
    from google.protobuf import json_format

    cls = message_class(descriptor_file, message_name)

    def decode(data: bytes) -> dict:
        return json_format.MessageToDict(cls.FromString(data), preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)

    return decode


def encoder(fmt: str, descriptor_file: str | None = None, message_name: str | None = None) -> Encoder:
    if fmt == RAW:
        return encode_raw
    if fmt == JSON:
        return encode_json
    if fmt == PROTOBUF:
        if not descriptor_file or not message_name:
            raise ValueError("the protobuf format needs descriptor file and message name options")
        return protobuf_encoder(descriptor_file, message_name)
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
