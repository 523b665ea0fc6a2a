"""Experiment tracking: every job a tracked run, from the job store's records.

With ``%ktrain config mlflow=URI`` (or ``--mlflow URI`` on a cell) each job becomes an MLflow
run as its lines arrive (the job service hooks it into the follow loop:
:mod:`jupyter_ktrain.runner.track`; :mod:`.points` is the one reader of the records for it;
:mod:`.mlflow_run` sends in batches from a background thread; :mod:`.side_by_side` puts runs side
by side). Each job's params and tracking state are kept in the job store (:mod:`.store`).
Nothing here imports a backend or the monitor: they stand above. The tracking URI a user gives
is checked with the configuration (:func:`jupyter_ktrain.config.check_uri`).
"""
