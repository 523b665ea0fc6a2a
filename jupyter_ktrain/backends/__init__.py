"""Backends run a captured program as a job: ``local`` (torchrun here) and ``kubernetes``.

- :mod:`.registry`: the way in from the rest of the package (get a backend by name, the default,
  the listed ones, ``render``);
- :mod:`.base`: the one :class:`~.base.Backend` interface, the plan and the job handle;
  :mod:`.capabilities`: what only some backends do (warm jobs, stored shapes);
- :mod:`.local` and :mod:`.kubernetes`: the backends;
- :mod:`.warm_shape`, :mod:`.results`: pieces both backends use (warm shapes, results from log
  lines).

This package's ``__init__`` imports nothing: importing a backend's module never loads the
registry, nor the other backends.
"""
