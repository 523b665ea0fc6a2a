"""A cluster job's logs: ``pod.py`` (one pod's log, nothing lost, nothing twice), ``streams.py``
(the streams a follow reads) and ``stored.py`` (the lines the kubelet keeps)."""
