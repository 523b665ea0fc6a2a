"""Field-for-field comparison of a rendered object with a seed manifest.

Lists of objects with a ``name`` (containers, env, volumes, mounts) are compared by name,
so paths read like ``...containers[pytorch].env[HF_TOKEN]``. Numbers and quantities compare
by value (``8`` == ``'8'``, ``5e8`` == ``500000000``).
"""

from __future__ import annotations

from typing import Any


def _keyed(items: list[Any]) -> dict[str, Any] | None:
    if items and all(isinstance(i, dict) and "name" in i for i in items):
        return {i["name"]: i for i in items}
    return None


def _same_scalar(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def diff(ours: Any, seed: Any, path: str = "") -> tuple[set[str], set[str]]:
    """(paths the seed asks for that we lack or set differently, paths only we set)."""
    if isinstance(seed, dict) and isinstance(ours, dict):
        differ, extra = set(), set()
        for key in seed:
            sub = f"{path}.{key}" if path else key
            if key not in ours:
                differ.add(sub)
            else:
                d, e = diff(ours[key], seed[key], sub)
                differ |= d
                extra |= e
        extra |= {f"{path}.{k}" if path else k for k in ours if k not in seed}
        return differ, extra
    if isinstance(seed, list) and isinstance(ours, list):
        ks, ko = _keyed(seed), _keyed(ours)
        if ks is not None and ko is not None:
            differ, extra = set(), set()
            for name, item in ks.items():
                if name not in ko:
                    differ.add(f"{path}[{name}]")
                else:
                    d, e = diff(ko[name], item, f"{path}[{name}]")
                    differ |= d
                    extra |= e
            extra |= {f"{path}[{n}]" for n in ko if n not in ks}
            return differ, extra
        if len(seed) != len(ours):
            return {path}, set()
        differ, extra = set(), set()
        for i, (o, s) in enumerate(zip(ours, seed, strict=True)):
            d, e = diff(o, s, f"{path}[{i}]")
            differ |= d
            extra |= e
        return differ, extra
    return (set() if _same_scalar(ours, seed) else {path}), set()
