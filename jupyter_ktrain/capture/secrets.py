"""Recognise secrets (tokens, passwords, keys) so they never travel inside the job's code.

Pure. A string is a secret by its *shape* (a Hugging Face, OpenAI, GitHub, AWS, Slack token, a
JWT, a PEM private key), wherever it sits, or by the *name* it is bound to: a global, a dict
key, an attribute, a parameter or a keyword whose words include TOKEN, SECRET, PASSWORD,
PASSWD or CREDENTIAL(S), or the pairs API KEY, ACCESS KEY, PRIVATE KEY, in snake or camel case
(``HF_TOKEN``, ``hfToken``, ``db_password``; not ``tokenizer``, ``MAX_TOKENS`` or
``key_dim``). A value found by its name only must look like a credential: no spaces, at least
six characters, not a path, not a special token such as ``<pad>`` or ``[CLS]``, not the name
of an environment variable.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CELL",
    "Finding",
    "env_name",
    "find_in_bytes",
    "find_in_source",
    "find_in_value",
    "is_secret_name",
    "refusal",
    "secret_at",
    "secret_shape",
]

CELL = "the %%ktrain cell"  # the owner of what the cell itself holds

_WORDS = {"token", "secret", "password", "passwd", "credential", "credentials"}
_PAIRS = {("api", "key"), ("access", "key"), ("private", "key")}
# a last word that makes the name describe a secret rather than hold one
_ABOUT = {
    "type", "name", "file", "path", "dir", "env", "var", "url", "uri", "endpoint", "ref",
    "hint", "length", "len", "count", "prefix", "suffix", "format", "pattern", "header",
    "kind", "mode", "field", "column",
}  # fmt: skip

_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,})")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}")),
    ("a PEM private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
)
# each shape's fixed prefixes: a fast substring test first, the regex only where one occurs
# (a pickled model is megabytes of tensor data)
_PREFIXES = (
    (b"hf_",),
    (b"sk-",),
    (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_"),
    (b"AKIA", b"ASIA"),
    (b"xox",),
    (b"eyJ",),
    (b"PRIVATE KEY-----",),
)
_BYTE_SHAPES = tuple(
    (kind, prefixes, re.compile(p.pattern.encode()))
    for (kind, p), prefixes in zip(_SHAPES, _PREFIXES, strict=True)
)
_USUAL_ENV = {
    "a Hugging Face token": "HF_TOKEN",
    "an OpenAI-style API key": "OPENAI_API_KEY",
    "a GitHub token": "GITHUB_TOKEN",
    "an AWS access key id": "AWS_ACCESS_KEY_ID",
    "a Slack token": "SLACK_TOKEN",
    "a JSON Web Token": "API_TOKEN",
    "a PEM private key": "PRIVATE_KEY",
}
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_MAX_NODES = 100_000


@dataclass(frozen=True)
class Finding:
    """A secret: ``where`` is how to reach it (``CONFIG['hf_token']``, ``train(token=...)``),
    ``name`` the name it is bound to (a global, key, attribute or parameter), ``kind`` why
    it counts as one."""

    where: str
    name: str
    kind: str

    @property
    def env(self) -> str:
        """The environment variable it belongs in: its own name when that says secret
        (``hfToken`` -> ``HF_TOKEN``), else the usual one for its shape."""
        if is_secret_name(self.name):
            return env_name(self.name)
        usual = (v for k, v in _USUAL_ENV.items() if self.kind.startswith(k))
        return next(usual, "SECRET_TOKEN")


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", spaced)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_secret_name(name: str) -> bool:
    """``HF_TOKEN``, ``hfToken``, ``db_password``, ``AWS_SECRET_ACCESS_KEY``: yes;
    ``tokenizer``, ``MAX_TOKENS``, ``key_dim``, ``TOKEN_TYPE``, ``SECRET_NAME``: no."""
    words = _words(name)
    if words and words[-1] in _ABOUT:  # TOKEN_TYPE, SECRET_NAME: about a secret, not one
        return False
    return bool(_WORDS & set(words)) or any(p in _PAIRS for p in itertools.pairwise(words))


def env_name(name: str) -> str:
    """The environment variable a secret named ``name`` belongs in: ``hfToken`` -> ``HF_TOKEN``."""
    return "_".join(_words(name)).upper() or "SECRET"


def secret_shape(text: str) -> str | None:
    """What kind of well-known token ``text`` contains, if any."""
    for kind, pattern in _SHAPES:
        if pattern.search(text):
            return kind
    return None


def _looks_like_credential(text: str) -> bool:
    if len(text) < 6 or any(c.isspace() for c in text) or _ENV_NAME.match(text):
        return False
    return not (text.startswith(("/", "./", "../", "~")) or text[0] + text[-1] in ("<>", "[]"))


def _secret(text: str, name: str | None) -> str | None:
    shape = secret_shape(text)
    if shape:
        return f"{shape}, by its value"
    if name and is_secret_name(name) and _looks_like_credential(text):
        return f"a string bound to the name {name!r}"
    return None


def find_in_bytes(data: bytes) -> str | None:
    """The kind of well-known token inside ``data`` (e.g. a pickle), if any."""
    for kind, prefixes, pattern in _BYTE_SHAPES:
        if any(prefix in data for prefix in prefixes) and pattern.search(data):
            return kind
    return None


def _children(obj: Any, where: str) -> Iterator[tuple[Any, str, str | None]]:
    """(child, path, name it is bound to) for containers, dataclasses and plain objects."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, str | bytes):
                yield key, where, None
            yield value, f"{where}[{key!r}]", key if isinstance(key, str) else None
    elif isinstance(obj, list | tuple | set | frozenset):
        for index, value in enumerate(obj):
            yield value, f"{where}[{index}]", None
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield getattr(obj, f.name, None), f"{where}.{f.name}", f.name
    else:
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(obj, type):
            for key, value in attrs.items():
                yield value, f"{where}.{key}", key


def find_in_value(name: str, value: Any) -> Finding | None:
    """The first secret inside ``value`` (bound to the global ``name``), walking containers,
    dataclasses and objects' attributes; a list's items count under the list's name."""
    todo: list[tuple[Any, str, str | None]] = [(value, name, name)]
    seen: set[int] = set()
    budget = _MAX_NODES  # a bound on the walk; token shapes in big values are still found
    # in their pickle (find_in_bytes)
    while todo:
        obj, where, bound = todo.pop()
        if isinstance(obj, bytes):
            obj = obj.decode("utf-8", "replace")
        if isinstance(obj, str):
            kind = _secret(obj, bound)
            if kind:
                return Finding(where, bound or name, kind)
            continue
        if id(obj) in seen or isinstance(obj, int | float | complex | type(None)):
            continue
        seen.add(id(obj))
        inherit = bound if isinstance(obj, list | tuple | set | frozenset) else None
        for child, path, child_name in _children(obj, where):
            if budget <= 0:
                return None
            budget -= 1
            todo.append((child, path, child_name or inherit))
    return None


def _bound_strings(node: ast.AST) -> Iterator[tuple[str, str, ast.Constant]]:
    """(where, name, string constant) for each string bound to a name in ``node``."""

    def strings(value: ast.AST | None) -> Iterator[ast.Constant]:
        """The string written directly as the bound value, or as an item of a list, tuple
        or set display (not an argument of a call: ``os.environ["HF_TOKEN"]`` is no secret)."""
        if isinstance(value, ast.Constant) and isinstance(value.value, str | bytes):
            yield value
        elif isinstance(value, ast.List | ast.Tuple | ast.Set):
            for item in value.elts:
                yield from strings(item)

    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign | ast.AnnAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                for leaf in ast.walk(target):
                    label = leaf.id if isinstance(leaf, ast.Name) else getattr(leaf, "attr", None)
                    for const in strings(sub.value) if label else ():
                        yield str(label), str(label), const
        elif isinstance(sub, ast.keyword) and sub.arg:
            for const in strings(sub.value):
                yield f"{sub.arg}=...", sub.arg, const
        elif isinstance(sub, ast.Dict):
            for key, value in zip(sub.keys, sub.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    for const in strings(value):
                        yield f"[{key.value!r}]", key.value, const
        elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = sub.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults) :]
            pairs = list(zip(with_default, args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
            for arg, default in pairs:
                for const in strings(default):
                    yield f"default of {arg.arg}", arg.arg, const


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def find_in_source(source: str, owner: str) -> Finding | None:
    """The first secret written in Python ``source`` (a function, a class, a cell): a string
    constant of a known token shape anywhere, or one bound to a secret-looking name (an
    assignment, a keyword argument, a dict key, a parameter's default)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for where, name, const in _bound_strings(tree):
        kind = _secret(_text(const.value), name)
        if kind:
            return Finding(f"{where} (line {const.lineno})", name, kind)
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str | bytes):
            shape = secret_shape(_text(sub.value))
            if shape:
                return Finding(f"line {sub.lineno}", owner, f"{shape}, by its value")
    return None


def secret_at(finding: Finding, owner: str, place: str) -> str:
    """Where the secret is, for a message: ``'CONFIG' (cell [3])``, ``X in 'f' (cell [2])``."""
    what = f"{owner!r} ({place})" if owner != CELL else owner
    return what if finding.where == owner else f"{finding.where} in {what}"


def refusal(finding: Finding, owner: str, place: str, key: str) -> str:
    """The whole refusal: where, why it matters, the flags that pass it by reference, and
    ``--allow-secret KEY``. Never the value."""
    env = finding.env
    secret = env.lower().replace("_", "-")
    item = env.lower().rsplit("_", 1)[-1]
    return (
        f"{secret_at(finding, owner, place)} is a secret ({finding.kind}). It would be written "
        f"into the job's code, where anyone who can read the code's ConfigMap, pull its code "
        f"image or open its job folder can read it, so nothing was created. To fix: keep it "
        f"out of the notebook's code and pass it by reference, then read "
        f"os.environ[{env!r}] inside the function. On Kubernetes: --secret-env "
        f"{env}={secret}/{item} (a Secret created once with `kubectl create secret generic "
        f"{secret} --from-literal={item}=...`); on the local backend: --env {env} (the "
        f"kernel's value, passed through the environment, never through a file). To ship "
        f"it in the code anyway (rarely right): --allow-secret {key}."
    )
