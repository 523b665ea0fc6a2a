"""In the job: training libraries the user imports report to the monitor by themselves.

The in-rank runtime calls :func:`install` before it runs the program. That adds one finder to
``sys.meta_path`` which answers for nothing but the modules in :data:`TARGETS`; every other
import goes past it untouched. When the user's code imports one of them (``from transformers
import Trainer`` loads ``transformers.trainer``), the module loads as usual and then gets its
hook. This package imports none of these libraries itself: without them nothing happens.

- ``transformers.trainer``: a callback joins ``DEFAULT_CALLBACKS``, so every ``Trainer``
  reports, from the process Trainer logs from (world process zero), what Trainer logs at its
  own logging steps (loss, learning_rate, grad_norm, epoch, eval metrics, speed) with
  ``step=global_step`` and ``total=max_steps``, plus progress at most once a second in
  between. Each metric is reported once per step (Trainer's closing summary repeats ``epoch``
  at the last step: the repeat is dropped). Every rank marks each step's end
  (:mod:`.steps`), where ``ktrain profile`` starts and stops.
- ``lightning.pytorch`` / ``pytorch_lightning`` (``trainer.trainer``): every ``Trainer``
  gets a logger beside the user's, so what Lightning logs reaches the monitor at Lightning's
  own logging steps (its loggers write from global rank 0), and a callback for progress
  (``global_step`` of ``max_steps`` or the estimated stepping batches). A ``Trainer`` made with
  ``logger=False`` logs nothing, so nothing is reported (our logger never becomes the first:
  it would move the checkpoint directory).
- ``transformers.training_args``: in a job started with ``--deepspeed``, a
  ``TrainingArguments`` made without ``deepspeed=`` gets the job's config
  (``KTRAIN_DEEPSPEED_CONFIG``, written to agree with Trainer: ``"auto"`` values), so the flag
  is never silently ignored. An explicit ``deepspeed=`` wins.
- ``torch.distributed.distributed_c10d``: ``destroy_process_group`` keeps the groups it
  destroys referenced until the rank's process ends, so PyTorch's process-group destructor
  (which can deadlock with gloo's worker thread over the GIL) never runs in the user's code.

Standard library only at import time.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .profiling.steps import mark as mark_step
from .protocol import RESERVED_KEYS
from .ranks import global_rank
from .report import report

__all__ = ["PROGRESS_EVERY_S", "TARGETS", "install", "lightning_classes", "trainer_callback_class"]

PROGRESS_EVERY_S = 1.0


def _say(text: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"jupyter-ktrain: {text}\n")


# -- Transformers -------------------------------------------------------------------------------
def _numbers(logs: Any) -> dict[str, float]:
    if not isinstance(logs, dict):
        return {}
    out: dict[str, float] = {}
    for name, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(name, str) and name not in RESERVED_KEYS:
            out[name] = float(value)
    return out


def trainer_callback_class(base: type) -> type:
    """A ``transformers.TrainerCallback`` subclass (``base``) that reports to the monitor."""

    class KtrainCallback(base):  # type: ignore[misc]
        """Reports Trainer's logs and progress through ``jupyter_ktrain.report``."""

        def __init__(self) -> None:
            self._progress_at = 0.0
            self._sent: dict[str, int] = {}  # metric -> last step it was reported at

        def _progress(self, state: Any, force: bool = False) -> None:
            now = time.monotonic()
            if force or now - self._progress_at >= PROGRESS_EVERY_S:
                self._progress_at = now
                report(step=state.global_step, total=state.max_steps or None)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                _defer_status_if_transformers_reports(args)
                self._progress(state, force=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            mark_step(state.global_step)  # on every rank: `ktrain profile` starts at steps
            if state.is_world_process_zero:
                self._progress(state)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            if not state.is_world_process_zero:
                return
            step = state.global_step
            fresh = {k: v for k, v in _numbers(logs).items() if self._sent.get(k) != step}
            for name in fresh:
                self._sent[name] = step
            self._progress_at = time.monotonic()
            report(step=step, total=state.max_steps or None, **fresh)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                self._progress(state, force=True)

    return KtrainCallback


def _defer_status_if_transformers_reports(args: Any) -> None:
    """Transformers' own Kubeflow callback (``report_to`` has ``kubeflow``) already sends
    progress to the TrainJob status endpoint: then ours stays quiet (one writer)."""
    if "kubeflow" in (getattr(args, "report_to", None) or ()):
        from . import trainer_status

        trainer_status.defer("Transformers' own Kubeflow callback reports it")


def _hook_transformers_trainer(module: ModuleType) -> None:
    defaults = getattr(module, "DEFAULT_CALLBACKS", None)
    try:
        base = importlib.import_module("transformers.trainer_callback").TrainerCallback
    except (ImportError, AttributeError):
        base = None
    if not isinstance(defaults, list) or base is None:
        _say(
            "this transformers version has no DEFAULT_CALLBACKS/TrainerCallback: Trainer's "
            "metrics are not reported to the monitor (call ktrain.report in a callback)"
        )
        return
    if not any(getattr(c, "__name__", "") == "KtrainCallback" for c in defaults):
        defaults.append(trainer_callback_class(base))


def _hook_training_args(module: ModuleType) -> None:
    args_class = getattr(module, "TrainingArguments", None)
    post_init = getattr(args_class, "__post_init__", None)
    if args_class is None or post_init is None or getattr(post_init, "_ktrain", False):
        return

    @functools.wraps(post_init)
    def __post_init__(self: Any) -> None:
        path = os.environ.get("KTRAIN_DEEPSPEED_CONFIG")
        if getattr(self, "deepspeed", None) is None and path and os.path.isfile(path):
            self.deepspeed = path
            if global_rank() in (None, 0):
                _say(f"TrainingArguments: deepspeed={path} (the job's --deepspeed config)")
        post_init(self)

    __post_init__._ktrain = True  # type: ignore[attr-defined]
    args_class.__post_init__ = __post_init__


# -- PyTorch Lightning ----------------------------------------------------------------------------
def _lightning_total(trainer: Any) -> int | None:
    total = getattr(trainer, "max_steps", -1)
    if not isinstance(total, int) or total <= 0:
        try:
            total = trainer.estimated_stepping_batches
        except Exception:
            return None
    return int(total) if isinstance(total, (int, float)) and 0 < total < float("inf") else None


def lightning_classes(package: str) -> tuple[type, type]:
    """(logger, callback) classes for the Lightning package ``package``, already imported."""
    logger_base = importlib.import_module(f"{package}.loggers.logger").Logger
    callback_base = importlib.import_module(f"{package}.callbacks").Callback

    class KtrainLogger(logger_base):  # type: ignore[misc, valid-type]
        """Hands what Lightning logs to ``jupyter_ktrain.report`` (global rank 0 only)."""

        def __init__(self, trainer: Any) -> None:
            super().__init__()
            self._trainer = trainer

        @property
        def name(self) -> str:
            return "ktrain"

        @property
        def version(self) -> str:
            return "0"

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            if getattr(self._trainer, "global_rank", 0) == 0:
                total = _lightning_total(self._trainer)
                report(step=step, total=total if step is not None else None, **_numbers(metrics))

    class KtrainProgress(callback_base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self._at = 0.0

        def _progress(self, trainer: Any, force: bool = False) -> None:
            now = time.monotonic()
            if trainer.global_rank == 0 and (force or now - self._at >= PROGRESS_EVERY_S):
                self._at = now
                report(step=trainer.global_step, total=_lightning_total(trainer))

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._progress(trainer, force=True)

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            mark_step(trainer.global_step)  # on every rank: `ktrain profile` starts at steps
            self._progress(trainer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._progress(trainer, force=True)

    return KtrainLogger, KtrainProgress


def _hook_lightning(package: str) -> Callable[[ModuleType], None]:
    def hook(module: ModuleType) -> None:
        trainer_class = getattr(module, "Trainer", None)
        init = getattr(trainer_class, "__init__", None)
        if trainer_class is None or init is None or getattr(init, "_ktrain", False):
            return
        logger_class, progress_class = lightning_classes(package)

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            try:
                if self.loggers:  # never first: the first logger places the checkpoints
                    self.loggers = [*self.loggers, logger_class(self)]
                self.callbacks.append(progress_class())
            except Exception as exc:
                _say(f"could not hook this Lightning Trainer ({exc!r}); use ktrain.report")

        __init__._ktrain = True  # type: ignore[attr-defined]
        trainer_class.__init__ = __init__

    return hook


# -- torch.distributed ----------------------------------------------------------------------
# Process groups the program destroyed, kept until the process ends (it ends without teardown).
_DESTROYED: list[Any] = []


def _hook_c10d(module: ModuleType) -> None:
    """``destroy_process_group`` keeps the groups it destroys referenced, so their C++
    destructor never runs inside the program. It would run where the user's last reference
    goes (a DDP model freed as ``train`` returns drops the group with its reducer), and there
    it can deadlock: it waits, holding the GIL, for gloo's worker thread, which waits for the
    GIL to free a finished collective's tensors (PyTorch's own race; seen in 1 of 4 warm runs
    of the quickstart's ``train``, with ``torch._dynamo`` imported ahead). The groups are shut
    down as before (``shutdown()``), only their memory and idle threads stay, until the rank's
    process ends."""
    destroy = getattr(module, "destroy_process_group", None)
    if destroy is None or getattr(destroy, "_ktrain", False):
        return

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> None:
        with contextlib.suppress(Exception):  # what torch lists now (private: may move)
            _DESTROYED.extend(module._world.pg_map)
        if group is not None:
            _DESTROYED.append(group)
        destroy(group)

    destroy_process_group._ktrain = True  # type: ignore[attr-defined]
    setattr(module, "destroy_process_group", destroy_process_group)  # noqa: B010
    package = sys.modules.get("torch.distributed")  # its re-export, when imported already
    if package is not None and getattr(package, "destroy_process_group", None) is destroy:
        setattr(package, "destroy_process_group", destroy_process_group)  # noqa: B010


TARGETS: dict[str, Callable[[ModuleType], None]] = {
    "torch.distributed.distributed_c10d": _hook_c10d,
    "lightning.pytorch.trainer.trainer": _hook_lightning("lightning.pytorch"),
    "pytorch_lightning.trainer.trainer": _hook_lightning("pytorch_lightning"),
    "transformers.trainer": _hook_transformers_trainer,
    "transformers.training_args": _hook_training_args,
}


# -- the import hook ----------------------------------------------------------------------------
class _HookedLoader(importlib.abc.Loader):
    """Runs the real loader, then the hook; the module keeps the real loader afterwards."""

    def __init__(self, real: importlib.abc.Loader, hook: Callable[[ModuleType], None]) -> None:
        self.real = real
        self.hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:
            spec.loader = self.real
        module.__loader__ = self.real
        self.real.exec_module(module)
        _run_hook(self.hook, module)


def _run_hook(hook: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as exc:  # never break the user's import
        _say(f"could not hook {module.__name__} ({exc!r}); its metrics are not reported")


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, targets: dict[str, Callable[[ModuleType], None]]) -> None:
        self.targets = targets
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self.targets.get(fullname)
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if hook is None or fullname in busy:
            return None
        busy.add(fullname)  # the real finders answer the lookup below, not us again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HookedLoader(spec.loader, hook)
        return spec


_installed: _Finder | None = None


def install(targets: dict[str, Callable[[ModuleType], None]] | None = None) -> None:
    """Hook :data:`TARGETS` (or ``targets``) when they are imported; a module already imported
    is hooked at once. Idempotent."""
    global _installed
    if _installed is not None:
        return
    chosen = TARGETS if targets is None else targets
    for name, hook in chosen.items():
        module = sys.modules.get(name)
        if module is not None:
            _run_hook(hook, module)
    _installed = _Finder({n: h for n, h in chosen.items() if n not in sys.modules})
    sys.meta_path.insert(0, _installed)
