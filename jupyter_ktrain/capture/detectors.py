"""Secrets recognised by their value alone, with detect-secrets' own detectors.

Two questions about one string, whatever name it is bound to:

* does it contain a credential of a known service's shape? detect-secrets' regex plugins
  (AWS, Azure, GitHub, GitLab, Slack, Stripe, Twilio, SendGrid, npm, PyPI, JWT, private keys
  and more); not its public-IP plugin (an address is no secret) nor its basic-auth one
  (``scheme://user:password@host`` is a shape of our own, which knows placeholders);
* is it a random token? detect-secrets' Base64HighEntropyString (its entropy limit) and its
  heuristic filters (sequential strings, UUIDs), on a string that is a whole token: 20 to 200
  characters, all from the base64 alphabets, both letter cases. Hex strings are left to the
  name rules: a sha256 checksum or a commit is hex, and so is most of what training code
  pins. So are identifiers: a string that mixes the standard alphabet's ``/`` or ``+`` with
  the URL-safe one's ``-`` or ``_``, or has ``=`` before its end, is encoded by no base64
  encoder, and one that many separators cut into words (``runs/Jun01_12-30-45_host``,
  ``exp_ResNet18_CIFAR10_lr0_1_bs128``) is a name. Tokens shorter than about 30 characters
  rarely pass the entropy limit: they are left to the name and environment rules.

detect-secrets is imported on first use: loading the extension stays fast.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["known_credential", "random_token"]

_MIN_TOKEN, _MAX_TOKEN = 20, 200
_STANDARD, _URL_SAFE = set("+/"), set("-_")
_SEPARATOR = re.compile(r"[-_/+]")
# addresses are no secrets (MASTER_ADDR, a dataset host); a URL's password is found by our
# own shape (secrets.URL_PASSWORD), which also reads f-strings and leaves placeholders alone
_SKIPPED = {"IPPublicDetector", "BasicAuthDetector"}
_MIN_SHAPE = 7  # no credential shape is shorter (``://u:p@``)


@functools.cache
def _regex_plugins() -> tuple[Any, ...]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    return tuple(
        cls()
        for cls in sorted(classes, key=lambda c: c.__name__)
        if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _SKIPPED
    )


@functools.cache
def _entropy() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString()


def _matches(plugin: Any, text: str) -> Iterator[str]:
    for found in plugin.analyze_string(text):
        if found:
            yield found


def known_credential(text: str) -> str | None:
    """detect-secrets' name for the kind of credential ``text`` contains
    (``'AWS Access Key'``, ``'Stripe Access Key'``), if any."""
    if len(text) < _MIN_SHAPE:
        return None
    for plugin in _regex_plugins():
        if next(_matches(plugin, text), None):
            return str(plugin.secret_type)
    return None


def _is_identifier(text: str) -> bool:
    """Made of words: both base64 alphabets' separators, or many separators."""
    chars = set(text)
    if chars & _STANDARD and chars & _URL_SAFE:
        return True
    separators = len(_SEPARATOR.findall(text))
    return separators > max(2, len(text) // 8)


def random_token(text: str) -> bool:
    """``text`` is a whole random token (an AWS secret access key, an API key) by detect-
    secrets' base64 entropy test and heuristics; see the module's docstring for what is not."""
    from detect_secrets.filters.heuristic import is_potential_uuid, is_sequential_string

    if not _MIN_TOKEN <= len(text) <= _MAX_TOKEN:
        return False
    plugin = _entropy()
    if set(text) - set(plugin.charset) or "=" in text.rstrip("="):
        return False  # not one base64 token ('=' is only its padding)
    if text.isupper() or text.islower():
        return False  # one letter case only: hex, a slug
    if _is_identifier(text) or is_sequential_string(text) or is_potential_uuid(text):
        return False
    return bool(plugin.calculate_shannon_entropy(text) > plugin.entropy_limit)
