"""The front ends: adapters that parse their input, call one verb of the job service
(:mod:`jupyter_ktrain.runner`, the sweep's above it) and render what it returns.

``magics.py`` (``%%ktrain`` and the ``%ktrain`` line commands), ``api.py`` (``ktrain.run``,
``ktrain.submit``, ``ktrain.sweep``), ``cli.py`` (the ``ktrain`` console script) with
``cli_render.py`` (``ktrain render``), ``commands.py`` (the line commands' table, shared by the
magic and the console script), ``notebook.py`` (the cell's front: widget or text). The side
panel's server is :mod:`jupyter_ktrain.server`.
"""
