"""User configuration: ``$KTRAIN_HOME/config.yaml`` (default ``~/.ktrain/config.yaml``).

``%ktrain config`` shows it, ``%ktrain config key=value ...`` sets keys (an empty value
removes one). Keys::

    backend               local | kubernetes (the default for %%ktrain and %ktrain list ...)
    namespace             Kubernetes namespace (else the kubeconfig's, else the pod's own)
    kubeconfig            path of a kubeconfig file (else $KUBECONFIG, ~/.kube/config, in-cluster)
    context               kubeconfig context (else its current-context)
    registry              REGISTRY/REPO to push code images to (else the ConfigMap route)
    base_image            image the code layer goes on when --image is not given
    insecure_registries   comma-separated hosts allowed over plain http
    offline_requirements  true | false: ship wheels with the code instead of installing in pods
    mlflow                MLflow tracking URI: every job becomes a run there (--mlflow wins)
    mlflow_experiment     the MLflow experiment of those runs (default ktrain; --experiment wins)
    clusters              comma-separated NAME=CONTEXT: the kubeconfig context of each Kueue
                          MultiKueueCluster NAME (a job dispatched there is followed there)
    kueue_namespace       where Kueue keeps the MultiKueueClusters' kubeconfig Secrets (default
                          kueue-system): read, where you may, for a worker clusters does not name

Never secrets: credentials stay in the kubeconfig and the docker config; a key or value that
looks like a credential is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError
from .store.home import ktrain_home

__all__ = [
    "OFF",
    "Config",
    "check_uri",
    "cluster_contexts",
    "config_path",
    "load_config",
    "set_config",
]

_USERINFO = re.compile(r"(^|//)[^/@\s:]+:[^/@\s]+@")  # user:password@host

# the tracking URI a user gives (``--mlflow``, ``%ktrain config mlflow=``), checked here
OFF = ("off", "none", "no", "false")
_SCHEMES = ("http://", "https://", "file:", "sqlite:", "postgresql:", "mysql:", "databricks")


def check_uri(uri: str, what: str = "--mlflow") -> str:
    """``uri`` when it names a tracking store MLflow reads (``http(s)://HOST:PORT``, a
    ``file:`` or database URI) or says off; else one error saying what to give."""
    text = uri.strip()
    if text.lower() in OFF or text.startswith(_SCHEMES):
        if "@" in text.split("//", 1)[-1].split("/", 1)[0]:
            raise SpecError(
                f"{what} {text!r} carries a user name or password: ktrain never stores secrets. "
                "Give the URI without them and set MLFLOW_TRACKING_USERNAME / "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the kernel."
            )
        return text
    raise SpecError(
        f"{what} {uri!r} is not a tracking URI: give the MLflow server's address, e.g. "
        f"{what} http://mlflow.example:5000 (or off)."
    )


@dataclass(frozen=True)
class Config:
    backend: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    registry: str | None = None
    base_image: str | None = None
    insecure_registries: tuple[str, ...] = ()
    offline_requirements: bool = False
    # the Kueue LocalQueue of every cluster job that names none (--kueue-queue wins)
    kueue_queue: str | None = None
    # the topology level (--topology) of every Kueue-queued job that names none
    topology: str | None = None
    # every job an MLflow run at this tracking URI (--mlflow wins), in this experiment
    mlflow: str | None = None
    mlflow_experiment: str | None = None
    # MultiKueue: "NAME=CONTEXT" per worker cluster (a MultiKueueCluster's name) this kubeconfig
    # reaches; a job Kueue dispatches to NAME is followed through CONTEXT
    clusters: tuple[str, ...] = ()
    # Kueue's own namespace (None: kueue-system), where its MultiKueueClusters' Secrets are
    kueue_namespace: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, (), False):
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def describe(self) -> str:
        data = self.as_dict()
        if not data:
            return f"No settings yet ({config_path()}). Set with %ktrain config key=value."
        return "\n".join(f"{k} = {_show(v)}" for k, v in data.items())


def _show(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def config_path() -> Path:
    """``$KTRAIN_HOME/config.yaml``."""
    return ktrain_home() / "config.yaml"


_KEYS = {f.name for f in fields(Config)}


def _convert(key: str, value: Any) -> Any:
    if key not in _KEYS:
        raise SpecError(
            f"Unknown config key {key!r}; known keys: {', '.join(sorted(_KEYS))} "
            "(`%ktrain config` shows the current values)."
        )
    if key == "insecure_registries":
        items = value.split(",") if isinstance(value, str) else list(value or ())
        return tuple(s.strip() for s in items if str(s).strip())
    if key == "clusters":
        items = value.split(",") if isinstance(value, str) else list(value or ())
        return tuple(_cluster_pair(str(s)) for s in items if str(s).strip())
    if key == "offline_requirements":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false", "1", "0", "yes", "no", ""):
            raise SpecError(f"offline_requirements={value!r}: use true or false.")
        return text in ("true", "1", "yes")
    if key == "backend" and value not in (None, "", "local", "kubernetes"):
        raise SpecError(f"backend={value!r}: use local or kubernetes.")
    if key in ("registry", "base_image") and value not in (None, ""):
        from .packaging.reference import Reference

        Reference.parse(str(value), what=key)  # OCI syntax, one line naming the key
    if key == "mlflow" and value not in (None, ""):
        check_uri(str(value), "mlflow=")
    return str(value) if value not in (None, "") else None


def _cluster_pair(text: str) -> str:
    """``NAME=CONTEXT`` of ``clusters``, stripped; one line where it is not that."""
    name, sep, context = (part.strip() for part in text.partition("="))
    if not (name and sep and context):
        raise SpecError(
            f"clusters: {text.strip()!r} is not NAME=CONTEXT: give each MultiKueueCluster's "
            "name and the kubeconfig context that reaches it, e.g. "
            "clusters=worker-east=east,worker-west=west."
        )
    return f"{name}={context}"


def cluster_contexts(config: Config) -> dict[str, str]:
    """``clusters`` as MultiKueueCluster name -> kubeconfig context."""
    return dict(pair.split("=", 1) for pair in config.clusters)


def load_config(path: Path | None = None) -> Config:
    """The saved configuration (defaults when there is no file)."""
    path = path or config_path()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (FileNotFoundError, NotADirectoryError):
        return Config()
    except OSError as exc:
        raise SpecError(_unusable(path, exc, "read")) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML ({exc}); fix or delete it.") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path} must hold a mapping of key: value; fix or delete it.")
    return Config(**{k: _convert(k, v) for k, v in data.items()})


def _refuse_secret(key: str, value: str) -> None:
    if _USERINFO.search(value):
        raise SpecError(
            f"`{key}` looks like it carries a credential; ktrain never stores secrets. Keep "
            "tokens in your kubeconfig and registry logins in the docker config "
            "(`docker login` / `skopeo login`)."
        )


def set_config(pairs: list[str], path: Path | None = None) -> Config:
    """Apply ``key=value`` pairs (empty value unsets) and save; returns the new config."""
    path = path or config_path()
    cfg = load_config(path)
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise SpecError(f"%ktrain config expects key=value, got {pair!r}.")
        _refuse_secret(key, value)
        changes[key] = _convert(key, value)
    cfg = replace(cfg, **changes)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(cfg.as_dict(), sort_keys=False))
        tmp.replace(path)
    except OSError as exc:
        raise SpecError(_unusable(path, exc, "save")) from None
    return cfg


def _unusable(path: Path, exc: OSError, doing: str) -> str:
    return (
        f"Cannot {doing} {path} ({exc.strerror or exc}): point KTRAIN_HOME at a folder you "
        f"can write (`%env KTRAIN_HOME=/path/to/folder`), or fix that folder's permissions."
    )
