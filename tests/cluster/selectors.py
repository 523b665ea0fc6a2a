"""Label and field selectors with the API server's syntax."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Predicate = Callable[[dict[str, Any]], bool]
_SET = re.compile(r"^\s*(!?[\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP = re.compile(r"^\s*([\w./-]+)\s*(==|!=|=)\s*([\w./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)([\w./-]+)\s*$")


def _split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_selector(text: str | None) -> Predicate:
    """Predicate over an object's ``metadata.labels``; 400 BadRequest on bad syntax."""
    if not text:
        return lambda obj: True
    reqs: list[Callable[[dict[str, str]], bool]] = []
    for term in _split(text):
        if m := _SET.match(term):
            key, op, vals = m[1], m[2], {v.strip() for v in m[3].split(",")}
            if op == "in":
                reqs.append(lambda ls, k=key, v=vals: ls.get(k) in v)
            else:
                reqs.append(lambda ls, k=key, v=vals: ls.get(k) not in v)
        elif m := _CMP.match(term):
            key, op, val = m[1], m[2], m[3]
            if op == "!=":
                reqs.append(lambda ls, k=key, v=val: ls.get(k) != v)
            else:
                reqs.append(lambda ls, k=key, v=val: ls.get(k) == v)
        elif m := _EXISTS.match(term):
            neg, key = m[1] == "!", m[2]
            reqs.append(lambda ls, k=key, n=neg: (k in ls) != n)
        else:
            raise bad_request(f"unable to parse requirement: {term!r}")

    def pred(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return pred


def field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_selector(text: str | None) -> Predicate:
    """Predicate over dotted field paths (``metadata.name=x,status.phase!=Running``)."""
    if not text:
        return lambda obj: True
    reqs: list[tuple[str, bool, str]] = []
    for term in _split(text):
        m = _CMP.match(term)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        reqs.append((m[1], m[2] == "!=", m[3]))

    def pred(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, p) == v) != neg for p, neg, v in reqs)

    return pred
