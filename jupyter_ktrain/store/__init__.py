"""The job store: everything jupyter-ktrain keeps on disk, under one folder, ``$KTRAIN_HOME``
(default ``~/.ktrain``), at the bottom of the package (it imports only the job vocabulary,
:mod:`jupyter_ktrain.jobs`, and :mod:`jupyter_ktrain.errors`)::

    $KTRAIN_HOME/config.yaml                          the user's settings (:mod:`..config`)
    $KTRAIN_HOME/jobs/NAME/                           a local job's folder (:mod:`.jobdirs`)
    $KTRAIN_HOME/history/BACKEND/NAME/state.json      a cluster job's kept state (:mod:`.history`)
    $KTRAIN_HOME/history/BACKEND/NAME/run.json        a job's tracking record (:mod:`.records`)

- :mod:`.home`: where the store is (the one place that reads ``KTRAIN_HOME``);
- :mod:`.files`: private folders and files (``0700``/``0600``), written whole or atomically,
  and the one error for a store this process cannot use;
- :mod:`.versions`: the rule every file of the store is read by: a ``version`` entry (absent:
  1, the files from before versions), unknown entries ignored, a newer version refused with one
  line;
- :mod:`.jobdirs`: a local job's folder, created exclusively, and its ``state.json`` (locked;
  the first final state written stands);
- :mod:`.history`: a cluster job's final state, kept after its objects are gone, and its logs,
  size-bounded;
- :mod:`.records`: a job's record (what it ran with, what went to the tracking server).
"""
