"""The process that owns a local job: ``nodes.py`` (:class:`~.nodes.Supervisor`: starts the nodes,
stops them, restarts after a fault, writes the end), ``output.py`` (what it reads from the
nodes' output), ``causes.py`` (which failure is the job's), ``warm_job.py`` (a ``--warm`` job's:
the nodes stay, runs come and go) and ``watchdog.py`` (its parent: the job's end when the
supervisor dies first). Started by :mod:`..daemon`."""
