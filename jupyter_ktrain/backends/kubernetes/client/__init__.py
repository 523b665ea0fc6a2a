"""The API client: :class:`~.kube_api.Api` (requests, streams, the verbs every part calls),
``retries.py`` (how a request fails: :class:`~.retries.Forbidden`,
:class:`~.retries.Conflict`...; the one retry policy), ``resources.py`` (one descriptor per
kind of object) and ``fields.py`` (typed reads of an object's fields). Imports nothing else of
the backend."""
