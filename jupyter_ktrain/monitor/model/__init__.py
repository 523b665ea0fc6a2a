"""The monitor's state (:class:`MonitorModel`, :mod:`.monitor_model`): what the cell's widget, its
text view and the side panel show of one job, with its header, alerts and restart markers
(:mod:`.header`) and its GPUs' series (:mod:`.gpuwatch`)."""

from .gpuwatch import GPU_FIELDS
from .header import Alert, JobHeader, Marker
from .monitor_model import MonitorModel

__all__ = ["GPU_FIELDS", "Alert", "JobHeader", "Marker", "MonitorModel"]
