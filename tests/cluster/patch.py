"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge (lists of named items merged by
``name``, the common case of the real one), and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request


def merge(target: Any, patch: Any, strategic: bool = False) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, val in patch.items():
        if key.startswith("$"):
            continue
        if val is None:
            out.pop(key, None)
        elif strategic and _named_list(val) and _named_list(out.get(key)):
            out[key] = _merge_named(out[key], val)
        else:
            out[key] = merge(out.get(key), val, strategic)
    return out


def _named_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, dict) and "name" in i for i in v)


def _merge_named(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {i["name"]: i for i in old}
    out = [copy.deepcopy(i) for i in old]
    for item in new:
        if item.get("$patch") == "delete":
            out = [i for i in out if i["name"] != item["name"]]
        elif item["name"] in by_name:
            idx = next(n for n, i in enumerate(out) if i["name"] == item["name"])
            out[idx] = merge(out[idx], item, True)
        else:
            out.append(copy.deepcopy(item))
    return out


def _walk(doc: Any, pointer: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    if not parts:
        raise bad_request("the JSON patch path must not be empty")
    cur = doc
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    return cur, parts[-1]


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            parent, last = _walk(doc, op["path"])
            kind = op["op"]
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(idx, copy.deepcopy(op["value"]))
                    else:
                        parent[idx] = copy.deepcopy(op["value"])
                else:
                    if kind == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "test":
                got = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if got != op["value"]:
                    raise ApiError(422, "Invalid", f"testing value {op['path']} failed")
            else:
                raise bad_request(f"Unexpected kind: {kind}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: {exc}",
            ) from exc
    return doc
