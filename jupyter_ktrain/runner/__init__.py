"""The application layer: one runner below every front end (:mod:`.run`), the options it
takes (:mod:`.options`), the code it captures (:mod:`.source`), the port a front end fills
(:mod:`.front`), and following a job (:mod:`.follow`). No IPython here.
"""
