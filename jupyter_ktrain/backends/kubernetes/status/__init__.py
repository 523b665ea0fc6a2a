"""Watches and status: ``watch.py`` (the cache of a job, its pods and events), ``derive.py``
(from the cache to a :class:`~jupyter_ktrain.jobs.JobStatus`, pure), ``reader.py`` (a job's
status as the backend reads it), ``job_runtime.py`` (what its logs told), ``kueue.py`` (Kueue's
word on it), ``cluster_history.py`` (an ended job's record) and ``listing.py``
(``%ktrain list``)."""
