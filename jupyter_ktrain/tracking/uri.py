"""The tracking URI a user gives (``--mlflow``, ``%ktrain config mlflow=``), checked. Pure."""

from __future__ import annotations

from ..errors import SpecError

__all__ = ["OFF", "check_uri"]

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
