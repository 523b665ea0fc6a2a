"""The checks the job description's parts share: Kubernetes names, labels, quantities and
environment variable names. Each raises one :class:`SpecError` naming the flag and the fix.
Pure; the bottom of the spec modules (:mod:`.spec_parts`, :mod:`.spec_scheduling`,
:mod:`.spec`).
"""

from __future__ import annotations

import re

from ..errors import SpecError

__all__ = [
    "check_dns_label",
    "check_env_name",
    "check_label",
    "check_nonneg",
    "check_quantity",
    "check_topology_level",
]

_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def check_quantity(flag: str, value: str | None) -> None:
    """Raise unless ``value`` is a Kubernetes quantity (or None)."""
    if value is not None and not _QUANTITY.match(value):
        raise SpecError(
            f"{flag} {value!r} is not a Kubernetes quantity: use e.g. '8', '500m', '64Gi'."
        )


def check_env_name(flag: str, name: str, example: str) -> None:
    if not _ENV_NAME.match(name):
        raise SpecError(
            f"{flag} {name!r} is not a valid environment variable name: use letters, digits "
            f"and '_' (e.g. {flag} {example})."
        )


def check_dns_label(flag: str, value: str, what: str) -> None:
    if not (_DNS1123.match(value) and len(value) <= 63):
        raise SpecError(
            f"{flag} {value!r} is not a valid {what}: use at most 63 lower-case letters, digits "
            f"and '-', starting and ending with a letter or digit."
        )


def check_label(flag: str, key: str, value: str) -> None:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise SpecError(
            f"{flag} key {key!r} is not a valid label key: use e.g. "
            f"'nvidia.com/gpu.product' or 'pool' ({flag} KEY=VALUE)."
        )
    if not _LABEL_VALUE.match(value) or len(value) > 63:
        raise SpecError(
            f"{flag} value {value!r} for {key!r} is not a valid label value: at most 63 "
            f"letters, digits, '-', '_' or '.', starting and ending with a letter or digit."
        )


def check_topology_level(flag: str, level: str) -> None:
    """A topology level: a node label key (``example.com/rack``) or its last part (``rack``)."""
    if not _LABEL_KEY.match(level) or len(level.rsplit("/", 1)[-1]) > 63:
        raise SpecError(
            f"{flag} {level!r} is not a topology level: name a level of the queue's Topology, "
            f"as its node label (e.g. {flag} cloud.example.com/rack) or the label's last part "
            f"(e.g. {flag} rack)."
        )


def check_nonneg(flag: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise SpecError(f"{flag} must be 0 or more, got {value}.")
