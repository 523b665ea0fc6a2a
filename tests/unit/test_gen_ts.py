"""The panel's TypeScript payload types and palette are generated from Python: they must not
drift (run ``python scripts/gen_ts.py`` after changing the payloads or the view-model)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gen() -> object:
    spec = importlib.util.spec_from_file_location("gen_ts", ROOT / "scripts" / "gen_ts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_typescript_matches_the_python_it_is_generated_from() -> None:
    gen = _gen()
    for name, make in gen.FILES.items():  # type: ignore[attr-defined]
        checked_in = (ROOT / "labextension" / "src" / name).read_text()
        assert checked_in == make(), f"{name} is stale: run python scripts/gen_ts.py"


def test_every_payload_field_reaches_typescript() -> None:
    from jupyter_ktrain.jobs import JOB_STATES
    from jupyter_ktrain.monitor.viewmodel import PALETTE
    from jupyter_ktrain.server import payloads

    ts = _gen().payloads_ts()  # type: ignore[attr-defined]
    for name in payloads.__all__:
        assert f"export interface {name}" in ts
    assert "colour: string;" in ts
    assert "values: SummaryPayload[];" in ts
    # a job's state is the union of the states, not any string: the panel's checks are typed
    assert "  state: JobState;" in ts
    union = next(line for line in ts.splitlines() if line.startswith("export type JobState ="))
    assert union.count("|") == len(JOB_STATES) - 1
    assert all(f'"{state}"' in union for state in JOB_STATES)
    palette = _gen().palette_ts()  # type: ignore[attr-defined]
    assert all(c in palette for c in PALETTE)
