"""A run delivered into a warm pod: ``python -m jupyter_ktrain.pod.agent.deliver``.

The notebook's kernel runs this in every pod of a warm job through ``pods/exec`` after each
change to the job's code ConfigMap (a run, an abort, an idle limit), with one line on stdin:
the **envelope**, ``{"v": 1, "body": TEXT, "sig": HEX}``. ``TEXT`` is the JSON of ``{"job":
CONFIGMAP, "run": N, "seq": Q, "annotations": {...}, "data": {...}, "binaryData": {...}}``
(the ConfigMap's order and files) and ``HEX`` is HMAC-SHA256 of ``TEXT`` under the job's key:
the Secret ``NAME-warm`` that the pod reads as ``$KTRAIN_WARM_KEY`` and the kernel reads
through the API. So starting code in a warm job takes both ``pods/exec`` and the job's key.

This process checks the signature, that the envelope is for this job (``$KTRAIN_WARM_CONFIGMAP``)
and that its order is newer than the folder's (``seq``, and a run number never older: no
replay), then mirrors it into the run folder (:func:`~.mirror.apply`, ``control.json`` last,
atomically), where the warm agent finds it. Exit status and one line on stderr:

- 0: applied (``delivered run N``);
- :data:`REFUSED` (3): a wrong or missing signature, a malformed envelope, another job's;
- :data:`STALE` (4): the folder holds this order or a newer one already (a delivery that
  crossed another, or a replay): nothing changed, nothing to do;
- 2: this is not a warm pod (no key, no run folder).

Standard library only: it runs in the pod, in a fresh interpreter, in about 50 ms.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .mirror import (
    CONFIGMAP_ENV,
    CONTROL_ANNOTATION,
    CONTROL_ENV,
    apply,
    folder_lock,
    folder_seq,
)

__all__ = ["KEY_ENV", "REFUSED", "STALE", "Refused", "open_envelope", "seal", "sign"]

KEY_ENV = "KTRAIN_WARM_KEY"
VERSION = 1
REFUSED, STALE = 3, 4


class Refused(Exception):
    """The envelope is not applied; ``code`` is the exit status that says why."""

    def __init__(self, message: str, code: int = REFUSED):
        super().__init__(message)
        self.code = code


def sign(key: str, body: bytes) -> str:
    """HMAC-SHA256 of ``body`` under ``key`` (the Secret's text), hex."""
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def seal(key: str, job: str, configmap: Mapping[str, Any]) -> bytes:
    """The envelope line for ``configmap`` (the job's code ConfigMap, named ``job``), signed."""
    meta = configmap.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    control = json.loads(annotations.get(CONTROL_ANNOTATION) or "{}")
    body = {
        "job": job,
        "run": int(control.get("run") or 0),
        "seq": int(control.get("seq") or 0),
        "annotations": annotations,
        "data": dict(configmap.get("data") or {}),
        "binaryData": dict(configmap.get("binaryData") or {}),
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    envelope = {"v": VERSION, "body": text, "sig": sign(key, text.encode())}
    return json.dumps(envelope, separators=(",", ":")).encode() + b"\n"


def open_envelope(key: str, job: str, line: bytes) -> dict[str, Any]:
    """The ConfigMap an envelope carries (in :func:`~.mirror.apply`'s shape), once its
    signature, its job and its order check out; raises :class:`Refused` otherwise."""
    try:
        envelope = json.loads(line)
        text, sig = envelope["body"], envelope["sig"]
        if envelope.get("v") != VERSION or not isinstance(text, str) or not isinstance(sig, str):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise Refused("refused: not a signed warm-run envelope") from None
    if not hmac.compare_digest(sign(key, text.encode()), sig):
        raise Refused("refused: the signature does not match this job's key")
    body = json.loads(text)
    if body.get("job") != job:
        raise Refused(f"refused: the envelope is for {body.get('job')!r}, this pod is {job!r}")
    annotations = body.get("annotations") or {}
    control = json.loads(annotations.get(CONTROL_ANNOTATION) or "{}")
    # what the signature covers must be the order applied: the run and seq inside it
    if (control.get("run"), control.get("seq")) != (body.get("run"), body.get("seq")):
        raise Refused("refused: the envelope's run does not match its order")
    return {
        "metadata": {"annotations": annotations},
        "data": body.get("data") or {},
        "binaryData": body.get("binaryData") or {},
    }


def deliver(line: bytes, key: str, job: str, folder: Path) -> int:
    """Check ``line`` and apply it to ``folder``; the run it orders. Raises :class:`Refused`."""
    configmap = open_envelope(key, job, line)
    control = json.loads(configmap["metadata"]["annotations"][CONTROL_ANNOTATION])
    seq, run = int(control.get("seq") or 0), int(control.get("run") or 0)
    with folder_lock(folder):
        have_seq, have_run = folder_seq(folder)
        if seq <= have_seq or run < have_run:
            raise Refused(
                f"stale: order {seq} (run {run}) is not newer than this pod's order {have_seq} "
                f"(run {have_run})",
                STALE,
            )
        got = apply(configmap, folder)
    if got is None:
        raise Refused("refused: the envelope orders no run")
    return got


def main(argv: list[str] | None = None) -> int:
    key, job = os.environ.get(KEY_ENV), os.environ.get(CONFIGMAP_ENV)
    folder = os.environ.get(CONTROL_ENV)
    if not key or not job or not folder:
        sys.stderr.write(f"deliver: not a warm pod ({KEY_ENV}, {CONFIGMAP_ENV}, {CONTROL_ENV})\n")
        return 2
    line = sys.stdin.buffer.readline()
    try:
        run = deliver(line, key, job, Path(folder))
    except Refused as exc:
        sys.stderr.write(f"{exc}\n")
        return exc.code
    sys.stderr.write(f"delivered run {run}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
