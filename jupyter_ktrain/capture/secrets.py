"""Recognise secrets (tokens, passwords, keys) so they never travel inside the job's code.

Pure, but for one snapshot of the kernel's environment. A string is a secret

* by its *value*: the value of an environment variable whose name says secret (a global read
  with ``os.environ['MY_SERVICE_CRED']``), a well-known token shape (Hugging Face, OpenAI,
  GitHub, AWS, Slack, a JWT, a PEM private key), a credential detect-secrets' regex plugins
  know, or a random token by detect-secrets' entropy test (:mod:`.detectors`), wherever it
  sits;
* or by the *name* it is bound to: a global, a dict key, an attribute, a parameter or a
  keyword whose words include TOKEN, SECRET, PASSWORD, PASSWD, PWD, PW, PASSPHRASE, CRED(S),
  CREDENTIAL(S) or AUTH, or pairs such as API KEY, ACCESS KEY, PRIVATE KEY, CLIENT KEY, in
  snake or camel case (``HF_TOKEN``, ``hfToken``, ``db_password``, ``creds``; not
  ``tokenizer``, ``MAX_TOKENS``, ``key_dim`` or ``auth_method``). A value found by its name
  only must look like a credential: no spaces, at least six characters, not a path, not a
  special token such as ``<pad>`` or ``[CLS]``, not the name of an environment variable.

In source text a string is also the value of a constant expression: ``'sk-proj-' + 'Q' * 40``
is scanned as the string it makes.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .detectors import known_credential, random_token

__all__ = [
    "CELL",
    "EnvSecrets",
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

# detect-secrets' KeywordDetector list is in these (api_?key, auth_?key, db_?pass, pwd, ...)
_WORDS = {
    "token", "secret", "password", "passwd", "pwd", "pw", "passphrase", "credential",
    "credentials", "cred", "creds", "auth", "apikey", "authkey", "privkey",
}  # fmt: skip
_PAIRS = {
    ("api", "key"), ("access", "key"), ("private", "key"), ("priv", "key"), ("client", "key"),
    ("service", "key"), ("account", "key"), ("signing", "key"), ("encryption", "key"),
    ("db", "key"), ("database", "key"), ("db", "pass"), ("database", "pass"), ("key", "pass"),
}  # fmt: skip
# a last word that makes the name describe a secret rather than hold one
_ABOUT = {
    "type", "name", "file", "path", "dir", "env", "var", "url", "uri", "endpoint", "ref",
    "hint", "length", "len", "count", "prefix", "suffix", "format", "pattern", "header",
    "kind", "mode", "field", "column", "method", "scheme", "provider", "backend", "host",
    "server", "domain", "realm", "sock", "socket", "enabled", "required", "user", "username",
    "level", "policy", "strategy", "version", "style", "id", "ids", "idx", "index",
}  # fmt: skip
_COUNT = {"n", "num", "max", "min"}  # a first word that makes it a number of tokens (n_token)
_NOT_SECRET_ENV = {"PWD", "OLDPWD"}  # the shell's working directories
_PLAIN_WORDS = {"true", "false", "none", "null", "yes", "no", "on", "off", "default"}
_MIN_CONTAINED = 12  # an environment secret this long is also looked for inside strings
_MAX_FOLDED = 100_000  # the longest string a constant expression is folded into

URL_PASSWORD = "a URL with a password in it (scheme://user:password@host)"
# ``scheme://user:password@host``: the user part may be anything (``{}`` stands for a part of
# an f-string read from a name); the password must be written out, not a placeholder such as
# ``{}``, ``$VAR``, ``%s``, ``<password>`` or ``***``
_URL_PASSWORD = (
    r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:"
    r"(?![$%<*])[^\s/@{}]+@[^\s/@]"
)

_URL_SHAPE = re.compile(_URL_PASSWORD)

_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,})")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}")),
    ("a PEM private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    (URL_PASSWORD, _URL_SHAPE),
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
    (b"://",),
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
    URL_PASSWORD: "SECRET_URL",
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
    env_var: str | None = None  # the kernel's environment variable that holds the value
    bound: bool = True  # bound to ``name`` (False: a string in an expression of ``name``)

    @property
    def env(self) -> str:
        """The environment variable it belongs in: the one it was read from, else its own
        name when that says secret (``hfToken`` -> ``HF_TOKEN``), else the usual one for its
        shape."""
        if self.env_var:
            return self.env_var
        if is_secret_name(self.name) or (self.kind.startswith(URL_PASSWORD) and self.bound):
            return env_name(self.name)  # a URL travels whole, under its own name (DATA_URL)
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
    if words and (words[-1] in _ABOUT or words[0] in _COUNT):  # TOKEN_TYPE, SECRET_NAME,
        return False  # pad_token_id, n_token: about a secret or a token, not one
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


class EnvSecrets:
    """The values of the kernel's environment variables whose names say secret
    (``MY_SERVICE_CRED``, ``OPENAI_API_KEY``), whatever their shape: a string equal to one,
    or holding a long one, is that secret."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.by_value: dict[str, str] = {}
        for name, value in sorted(environ.items()):
            if name not in _NOT_SECRET_ENV and is_secret_name(name) and _env_secret(value):
                self.by_value.setdefault(value, name)
        self.long = [(v, n) for v, n in self.by_value.items() if len(v) >= _MIN_CONTAINED]

    def holder(self, text: str) -> str | None:
        """The environment variable whose secret value ``text`` is or holds."""
        name = self.by_value.get(text)
        if name is None and len(text) >= _MIN_CONTAINED:
            name = next((n for v, n in self.long if v in text), None)
        return name

    def in_bytes(self, data: bytes) -> str | None:
        return next((n for v, n in self.long if v.encode() in data), None)


def _env_secret(value: str) -> bool:
    """A value worth looking for: not a flag, a number, a word like ``true`` or a path."""
    if value.lower() in _PLAIN_WORDS or (value.isdigit() and len(value) < 8):
        return False
    return len(value) >= 6 and not value.startswith(("/", "./", "../", "~"))


def _secret(text: str, name: str | None, env: EnvSecrets) -> tuple[str, str | None] | None:
    """Why ``text`` (bound to ``name``) is a secret, and the environment variable it came
    from, if it is one."""
    holder = env.holder(text)
    if holder:
        return f"the value of the kernel's environment variable {holder}", holder
    shape = secret_shape(text)
    if shape:
        return f"{shape}, by its value", None
    if name and is_secret_name(name) and _looks_like_credential(text):
        return f"a string bound to the name {name!r}", None
    known = known_credential(text)
    if known:
        return f"a credential detect-secrets calls {known!r}, by its value", None
    if random_token(text) and not (name and _is_id(name)):
        return "a random-looking token, by its entropy", None
    return None


def _is_id(name: str) -> bool:
    """``model_id``, ``run_ids``, ``id``: an identifier, not a key (detect-secrets' rule)."""
    return _words(name)[-1:] in (["id"], ["ids"])


def find_in_bytes(data: bytes, env: EnvSecrets | None = None) -> str | None:
    """The kind of well-known token inside ``data`` (e.g. a pickle), if any, or the secret
    value of a kernel environment variable."""
    holder = (env or EnvSecrets()).in_bytes(data)
    if holder:
        return f"the value of the kernel's environment variable {holder}"
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


def find_in_value(name: str, value: Any, env: EnvSecrets | None = None) -> Finding | None:
    """The first secret inside ``value`` (bound to the global ``name``), walking containers,
    dataclasses and objects' attributes; a list's items count under the list's name."""
    env = env or EnvSecrets()
    todo: list[tuple[Any, str, str | None]] = [(value, name, name)]
    seen: set[int] = set()
    budget = _MAX_NODES  # a bound on the walk; token shapes in big values are still found
    # in their pickle (find_in_bytes)
    while todo:
        obj, where, bound = todo.pop()
        if isinstance(obj, bytes):
            obj = obj.decode("utf-8", "replace")
        if isinstance(obj, str):
            why = _secret(obj, bound, env)
            if why:
                return Finding(where, bound or name, *why)
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


def _fold(node: ast.AST | None) -> str | bytes | None:
    """The string a constant expression makes: a literal, ``'a' + 'b'``, ``'Q' * 40``,
    ``f"{'x'}y"``; None for anything that reads a name or calls a function."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str | bytes) else None
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(_formatted(v)) for v in node.values]
        texts = [p for p in parts if isinstance(p, str)]
        return "".join(texts) if len(texts) == len(parts) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left), _fold(node.right)
        if isinstance(left, str) and isinstance(right, str):
            return left + right if len(left) + len(right) <= _MAX_FOLDED else None
        if isinstance(left, bytes) and isinstance(right, bytes):
            return left + right if len(left) + len(right) <= _MAX_FOLDED else None
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        text, times = _fold(node.left), _count(node.right)
        if text is None:
            text, times = _fold(node.right), _count(node.left)
        if text is None or times is None or len(text) * times > _MAX_FOLDED:
            return None
        return text * times
    return None


def _formatted(node: ast.expr) -> ast.expr | None:
    """What a part of an f-string shows: itself, the value of a plain ``{value}``, or None
    (a conversion or a format spec)."""
    if not isinstance(node, ast.FormattedValue):
        return node
    return node.value if node.conversion == -1 and not node.format_spec else None


def _count(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
        return node.value
    return None


def _bound_strings(node: ast.AST) -> Iterator[tuple[str, str, str | bytes, int]]:
    """(where, name, string, line) for each string bound to a name in ``node``."""

    def strings(value: ast.expr | None) -> Iterator[tuple[str | bytes, int]]:
        """The string the bound value makes (a literal or a constant expression), or an item
        of a list, tuple or set display (not an argument of a call:
        ``os.environ["HF_TOKEN"]`` is no secret)."""
        folded = _fold(value)
        if folded is not None and value is not None:
            yield folded, value.lineno
        elif isinstance(value, ast.List | ast.Tuple | ast.Set):
            for item in value.elts:
                yield from strings(item)

    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign | ast.AnnAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                for leaf in ast.walk(target):
                    label = leaf.id if isinstance(leaf, ast.Name) else getattr(leaf, "attr", None)
                    for text, line in strings(sub.value) if label else ():
                        yield str(label), str(label), text, line
        elif isinstance(sub, ast.keyword) and sub.arg:
            for text, line in strings(sub.value):
                yield f"{sub.arg}=...", sub.arg, text, line
        elif isinstance(sub, ast.Dict):
            for key, value in zip(sub.keys, sub.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    for text, line in strings(value):
                        yield f"[{key.value!r}]", key.value, text, line
        elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = sub.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults) :]
            pairs = list(zip(with_default, args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
            for arg, default in pairs:
                for text, line in strings(default):
                    yield f"default of {arg.arg}", arg.arg, text, line


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def find_in_source(source: str, owner: str, env: EnvSecrets | None = None) -> Finding | None:
    """The first secret written in Python ``source`` (a function, a class, a cell): a string
    (a literal or a constant expression) that is a secret by its value anywhere, or one bound
    to a secret-looking name (an assignment, a keyword argument, a dict key, a parameter's
    default)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    env = env or EnvSecrets()
    for where, name, text, line in _bound_strings(tree):
        why = _secret(_text(text), name, env)
        if why:
            return Finding(f"{where} (line {line})", name, *why)
    for sub in ast.walk(tree):
        if not isinstance(sub, ast.expr):
            continue
        folded = _fold(sub)
        why = _secret(_text(folded), None, env) if folded is not None else None
        if why:
            return Finding(f"line {sub.lineno}", owner, *why, bound=False)
        template = _template(sub) if folded is None else None
        if template is not None and _URL_SHAPE.search(template):
            return Finding(f"line {sub.lineno}", owner, URL_PASSWORD, bound=False)
    return None


def _template(node: ast.AST) -> str | None:
    """What an f-string or a ``+`` of strings makes with ``{}`` for each part read from a
    name (``f"https://{user}:pw@host"`` -> ``https://{}:pw@host``); None for anything else.
    A password written out beside a name still travels in the code."""
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(_formatted(v)) for v in node.values]
        return "".join(p if isinstance(p, str) else "{}" for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = (_fold(n) or _template(n) or "{}" for n in (node.left, node.right))
        return f"{left}{right}" if isinstance(left, str) and isinstance(right, str) else None
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
