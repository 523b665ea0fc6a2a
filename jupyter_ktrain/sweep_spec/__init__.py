"""What a sweep is asked for, as values: the search space (:mod:`.space`:
``lr=loguniform(1e-5,1e-3)``), the objective (:mod:`.objective`: ``loss:min``) and the search
options (:mod:`.sweep_options`: :class:`~.sweep_options.SweepOptions`, from the cell's sweep
flags or ``ktrain.sweep``'s arguments). Pure; below the job service, where the flags are read. The
sweep itself (many runs of the service) is :mod:`jupyter_ktrain.sweep`.
"""
