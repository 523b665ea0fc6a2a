"""Sweeps: many trials of one cell (or one function), each a run of the job service
(:mod:`jupyter_ktrain.runner`): a client above it.

What a sweep is asked for (its space, objective and search options) are values below the
service (:mod:`jupyter_ktrain.sweep_spec`). Pure parts here: the median pruning rule
(:mod:`.prune`) and the results (:mod:`.trials`: :class:`~.trials.Sweep`). The edges: Optuna's
samplers (:mod:`.search`) and the trials run on jobs (:mod:`.driver`).
"""
