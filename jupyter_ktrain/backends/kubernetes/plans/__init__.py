"""What a submit creates and whether it can: ``plan.py`` (:class:`~.plan.KubernetesRequest`),
``manifests.py`` with ``podtemplate.py``, ``builders.py`` (one builder per job kind),
``scrape.py`` and ``fault_runtime.py`` (the objects around the job), ``placement.py`` (Kueue's
topology annotations, and where Kueue put the job), ``validate.py`` (schemas and semantic
checks), ``preflight.py`` and ``topology_check.py`` (can this cluster run it) and
``dry_run.py`` (the plan as text). Pure but for the preflight's and the topology check's
reads."""
