"""The few Kubernetes protobuf bodies kubectl sends for built-in kinds.

``kubectl create namespace|configmap|secret`` send ``application/vnd.kubernetes.protobuf``
(``k8s\\0`` + runtime.Unknown). This decodes those three kinds into JSON objects; any other
protobuf body is answered 415, and every response is JSON (kubectl accepts both).
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import ApiError

MAGIC = b"k8s\x00"


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf: bytes) -> list[tuple[int, Any]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            val, i = buf[i : i + n], i + n
        elif wire == 1:
            val, i = buf[i : i + 8], i + 8
        elif wire == 5:
            val, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, val))
    return out


def _map(entries: list[bytes], binary: bool = False) -> dict[str, str]:
    out = {}
    for e in entries:
        kv = dict(fields(e))
        value = kv.get(2, b"")
        out[kv.get(1, b"").decode()] = (
            base64.b64encode(value).decode() if binary else value.decode()
        )
    return out


def _meta(buf: bytes) -> dict[str, Any]:
    fs = fields(buf)
    meta: dict[str, Any] = {}
    for num, key in ((1, "name"), (2, "generateName"), (3, "namespace")):
        vals = [v for n, v in fs if n == num]
        if vals and vals[-1]:
            meta[key] = vals[-1].decode()
    for num, key in ((11, "labels"), (12, "annotations")):
        vals = [v for n, v in fs if n == num]
        if vals:
            meta[key] = _map(vals)
    return meta


def decode(body: bytes) -> dict[str, Any]:
    if not body.startswith(MAGIC):
        raise ApiError(415, "UnsupportedMediaType", "the body is not a Kubernetes protobuf object")
    unknown = dict(fields(body[len(MAGIC) :]))
    type_meta = dict(fields(unknown.get(1, b"")))
    api_version = type_meta.get(1, b"").decode()
    kind = type_meta.get(2, b"").decode()
    raw = fields(unknown.get(2, b""))
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    meta = [v for n, v in raw if n == 1]
    obj["metadata"] = _meta(meta[0]) if meta else {}
    if kind == "Namespace":
        return obj
    if kind == "ConfigMap":
        data = [v for n, v in raw if n == 2]
        binary = [v for n, v in raw if n == 3]
        if data:
            obj["data"] = _map(data)
        if binary:
            obj["binaryData"] = _map(binary, binary=True)
        return obj
    if kind == "Secret":
        data = [v for n, v in raw if n == 2]
        if data:
            obj["data"] = _map(data, binary=True)
        typ = [v for n, v in raw if n == 3]
        if typ:
            obj["type"] = typ[-1].decode()
        return obj
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the test cluster decodes protobuf only for Namespace, ConfigMap and Secret, not {kind}; "
        "send JSON",
    )
