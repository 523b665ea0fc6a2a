"""Structural-schema validation, defaulting and pruning of custom resources.

Follows what the API server does with a CRD's ``openAPIV3Schema``: fields the schema does not
declare are pruned (or, with ``fieldValidation=Strict``, rejected with 400 ``strict decoding
error: unknown field "spec.x"``), defaults are applied, and violations become 422 causes with
field paths (``spec.pytorchReplicaSpecs.Worker.replicas``) and the server's messages.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TYPES = {
    "string": (str,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return json.dumps(value)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(kind, (object,)))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Validator:
    """Walks one object against one schema, collecting causes and unknown-field paths."""

    def __init__(self) -> None:
        self.causes: list[dict[str, str]] = []
        self.unknown: list[str] = []

    def _invalid(self, path: str, value: Any, why: str) -> None:
        msg = f"Invalid value: {_show(value)}: {why}"
        self.causes.append({"reason": "FieldValueInvalid", "message": msg, "field": path})

    def walk(self, schema: dict[str, Any], value: Any, path: str) -> Any:
        """Returns the pruned/defaulted value; records problems on ``self``."""
        if value is None:
            if not schema.get("nullable"):
                self.causes.append(
                    {
                        "reason": "FieldValueRequired" if False else "FieldValueInvalid",
                        "message": f'Invalid value: "null": {path} in body must be of type '
                        f'{schema.get("type", "object")}: "null"',
                        "field": path,
                    }
                )
            return value
        if schema.get("x-kubernetes-int-or-string"):
            if not (isinstance(value, str) or _type_ok("integer", value)):
                self._invalid(path, value, f"{path} in body must be of type integer-or-string")
            return value
        kind = schema.get("type")
        if kind and not _type_ok(kind, value):
            shown = type(value).__name__
            shown = {
                "str": "string",
                "int": "integer",
                "float": "number",
                "bool": "boolean",
                "dict": "object",
                "list": "array",
            }.get(shown, shown)
            self._invalid(path, value, f'{path} in body must be of type {kind}: "{shown}"')
            return value
        self._scalar_checks(schema, value, path)
        if isinstance(value, dict):
            return self._object(schema, value, path)
        if isinstance(value, list) and "items" in schema:
            return [self.walk(schema["items"], v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    def _scalar_checks(self, schema: dict[str, Any], value: Any, path: str) -> None:
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(_show(v) for v in schema["enum"])
            self.causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "message": f"Unsupported value: {_show(value)}: supported values: {allowed}",
                    "field": path,
                }
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                self._invalid(
                    path,
                    value,
                    f"{path} in body should be greater than or equal to {schema['minimum']}",
                )
            if "maximum" in schema and value > schema["maximum"]:
                self._invalid(
                    path,
                    value,
                    f"{path} in body should be less than or equal to {schema['maximum']}",
                )
        if (
            isinstance(value, str)
            and "pattern" in schema
            and not re.search(schema["pattern"], value)
        ):
            self._invalid(path, value, f"{path} in body should match '{schema['pattern']}'")

    def _object(self, schema: dict[str, Any], value: dict[str, Any], path: str) -> dict[str, Any]:
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields", False)
        out: dict[str, Any] = {}
        for key, sub in value.items():
            sub_path = _join(path, key)
            if props is not None and key in props:
                out[key] = self.walk(props[key], sub, sub_path)
            elif isinstance(addl, dict):
                out[key] = self.walk(addl, sub, sub_path)
            elif keep or (props is None and addl is None) or addl is True:
                out[key] = sub
            else:
                self.unknown.append(sub_path)
        for key, sub in (props or {}).items():
            if key not in out and "default" in sub:
                out[key] = json.loads(json.dumps(sub["default"]))
        for key in schema.get("required", []):
            if key not in out:
                self.causes.append(
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value",
                        "field": _join(path, key),
                    }
                )
        return out


def validate(
    schema: dict[str, Any], obj: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, str]], list[str]]:
    """(pruned object, 422 causes, unknown field paths) for a whole custom resource.

    ``apiVersion``, ``kind`` and ``metadata`` are kept as they are (the server validates
    metadata itself, as ObjectMeta).
    """
    v = Validator()
    body = {k: val for k, val in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    root = dict(schema)
    props = {k: p for k, p in (root.get("properties") or {}).items() if k not in ("metadata",)}
    root["properties"] = props
    pruned = v.walk(root, body, "")
    out = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": obj.get("metadata", {}),
    }
    out.update(pruned)
    return out, v.causes, v.unknown
