"""The code layer is deterministic, well-formed, and carries the runner library.

The tests of tests/unit/test_packaging_layer.py that start processes (a unit test starts none)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from jupyter_ktrain.packaging.layer import (
    build_layer,
    runner_files,
)


def test_digest_is_the_same_in_another_process_with_other_clock_zone_and_umask(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        """
        import os, time
        from jupyter_ktrain.packaging.layer import build_layer
        os.umask(0o077); time.tzset()
        files = {"/ktrain/program.py": b"print('hello')\\n", "/ktrain/a/b.txt": b"x" * 5000}
        print(build_layer(files).digest)
        """
    )
    env = {"TZ": "Asia/Kolkata", "PYTHONPATH": str(Path.cwd()), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    files = {"/ktrain/program.py": b"print('hello')\n", "/ktrain/a/b.txt": b"x" * 5000}
    assert out == build_layer(files).digest


def test_runner_files_are_enough_for_the_pod_side(tmp_path: Path) -> None:
    """Only the pod side travels, and every module of it imports with nothing but the standard
    library; ``import jupyter_ktrain`` there gives ``report``, which writes its record."""
    import json
    import os

    files = runner_files("/lib")
    for path, data in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    lib = tmp_path / "lib"
    modules = sorted(
        ".".join(p.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
        for p in (lib / "jupyter_ktrain" / "pod").rglob("*.py")
        if p.name != "__main__.py"
    )
    code = (
        "import sys; "
        f"sys.path.insert(0, {str(lib)!r}); import importlib; "
        f"[importlib.import_module(m) for m in {modules!r}]; "
        "import jupyter_ktrain as ktrain; ktrain.report(step=1, loss=0.5); "
        "import json; tops = {m.split('.')[0] for m in sys.modules}; "
        "print(json.dumps({'ours': sorted(m for m in sys.modules if m.startswith('jupyter_')), "
        "'other': sorted(tops - sys.stdlib_module_names - {'jupyter_ktrain', '__main__'})}))"
    )
    env = {**os.environ, "RANK": "0"}
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert '@@ktrain {"type":"metric","rank":0,' in done.stdout
    # the record is held a moment (written together with the next ones, or at exit)
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith('{"ours": ')]
    loaded = json.loads(line)
    assert loaded["other"] == [], loaded
    assert all(m == "jupyter_ktrain" or m.startswith("jupyter_ktrain.pod") for m in loaded["ours"])
