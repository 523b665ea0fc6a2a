"""Experiment tracking: every job a tracked run, from the notebook side.

With ``%ktrain config mlflow=URI`` (or ``--mlflow URI`` on a cell) each job becomes an MLflow
run as its lines arrive (:mod:`.session` hooks into the follow loop; :mod:`.points` is the one
reader of the records for it; :mod:`.mlflow_run` sends in batches from a background thread).
Each job's params and tracking state are kept in the job store (:mod:`.store`). Nothing is
imported here: :mod:`jupyter_ktrain.spec` reads :mod:`.uri` while the package loads.
"""
