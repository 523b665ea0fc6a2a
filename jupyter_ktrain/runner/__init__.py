"""The job service, below every front end: running a job (:mod:`.run`, with the options it
takes, :mod:`.options`, the code it captures, :mod:`.source`, and following it,
:mod:`.follow`), every verb on a job that exists (:mod:`.verbs`: list, status, logs, attach,
cancel, warm, delete, compare, stacks, profile), what a reader that stays reads between polls
(:mod:`.feeds`), and MLflow tracking wired to a followed job (:mod:`.track`,
:mod:`.track_detached`). The port a front end fills is :mod:`.front`. No IPython here, and
nothing of the sweep: a sweep is a client above.
"""
