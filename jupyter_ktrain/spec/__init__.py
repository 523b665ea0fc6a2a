"""What a job is asked to be: :class:`JobSpec` (``job.py``) and what it is made of.

``parts.py`` (what a pod is made of), ``scheduling.py`` (where it runs, how it restarts),
``checks.py`` (the name and quantity rules), ``values.py`` (the one conversion of flag, YAML and
keyword values), the presets ``deepspeed.py`` and ``rdma.py``. Pure data and checks: no I/O.
"""

from __future__ import annotations

from .job import JobSpec, Resources

__all__ = ["JobSpec", "Resources"]
