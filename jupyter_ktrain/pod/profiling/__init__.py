"""``ktrain profile``: ``profiler.py`` (torch.profiler over the rank's next N steps),
``steps.py`` (a rank's step boundaries, from what it reports) and ``summary.py`` (a profile's
figures from its trace: top operators, compute, communication and waiting)."""
