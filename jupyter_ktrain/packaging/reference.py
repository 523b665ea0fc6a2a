"""Image references: ``[registry/]repository[:tag][@sha256:...]`` (docker's normalization)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import SpecError

__all__ = ["DOCKER_HUB", "Reference"]

DOCKER_HUB = "registry-1.docker.io"
_REPO = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# host[:port]: DNS labels, an IPv4 address or a bracketed IPv6 address (distribution's grammar)
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)


@dataclass(frozen=True)
class Reference:
    """A parsed image reference. ``registry`` is the API host (``host[:port]``)."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @classmethod
    def parse(cls, text: str, *, what: str = "image") -> Reference:
        """Parse ``text``; bare names go to Docker Hub (``library/`` for one-part names).

        ``what`` names the option in the error message: a flag (``--image``) or a config key
        (``registry``, ``base_image``).
        """
        rest, digest = text.strip(), ""
        if "@" in rest:
            rest, digest = rest.split("@", 1)
        first, sep, remainder = rest.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, remainder
        else:
            registry, path = DOCKER_HUB, rest
        tag = ""
        if ":" in path.rsplit("/", 1)[-1]:
            path, tag = path.rsplit(":", 1)
        if registry in ("docker.io", "index.docker.io"):
            registry = DOCKER_HUB
        if registry == DOCKER_HUB and "/" not in path:
            path = f"library/{path}"
        ref = cls(registry, path, tag, digest)
        ref._validate(text, what)
        return ref

    def _validate(self, text: str, what: str) -> None:
        problem = ""
        if not text.strip() or any(c.isspace() for c in text.strip()):
            problem = "it is empty or holds white space"
        elif not _HOST.match(self.registry):
            problem = f"registry host {self.registry!r} is not host[:port]"
        elif not _REPO.match(self.repository):
            problem = f"repository {self.repository!r} must be lower case letters, digits, '._-/'"
        elif self.tag and not _TAG.match(self.tag):
            problem = f"tag {self.tag!r} is not valid"
        elif self.digest and not _DIGEST.match(self.digest):
            problem = f"digest {self.digest!r} must be sha256:<64 hex digits>"
        if problem:
            fix = f"{what} IMAGE" if what.startswith("-") else f"`%ktrain config {what}=...`"
            example = (
                "registry.example.com/team/ktrain"
                if what == "registry"
                else "nvcr.io/nvidia/pytorch:24.03-py3"
            )
            raise SpecError(
                f"{what} {text!r} is not an image reference: {problem}. Fix {fix} (e.g. {example})."
            )

    @property
    def ref(self) -> str:
        """What goes after ``/manifests/``: the digest if any, else the tag (default latest)."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> Reference:
        return replace(self, tag="", digest=digest)

    def with_tag(self, tag: str) -> Reference:
        return replace(self, tag=tag, digest="")

    def __str__(self) -> str:
        host = "docker.io" if self.registry == DOCKER_HUB else self.registry
        out = f"{host}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out
