"""Sweeps: many trials of one cell (or one function), each a run of the one runner.

Pure parts: the search space (:mod:`.space`: ``lr=loguniform(1e-5,1e-3)``), what a sweep is
asked for (:mod:`.options`), the objective (:mod:`.objective`: ``loss:min``), the median
pruning rule (:mod:`.prune`) and the results (:mod:`.trials`: :class:`~.trials.Sweep`). The
edges: Optuna's samplers (:mod:`.search`) and the trials run on jobs (:mod:`.run`).
"""
