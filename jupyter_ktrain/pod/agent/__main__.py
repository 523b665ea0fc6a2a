"""``python -m jupyter_ktrain.pod.agent [options] -- CMD...``: the per-replica runner."""

from __future__ import annotations

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], adopt_orphans=True))
