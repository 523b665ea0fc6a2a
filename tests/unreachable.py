"""A kubeconfig whose server nothing listens on: what an unreachable cluster looks like."""

from __future__ import annotations

from pathlib import Path

from tests.jupyter_process import free_port

CONTEXT = "offsite"


def closed_kubeconfig(folder: Path) -> tuple[Path, str]:
    """(kubeconfig path, server URL) for a cluster at a closed local port."""
    server = f"https://127.0.0.1:{free_port()}"
    path = folder / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster: {{server: '{server}'}}\n"
        f"contexts:\n- name: {CONTEXT}\n  context: {{cluster: c, user: u, namespace: team}}\n"
        f"current-context: {CONTEXT}\n"
        "users:\n- name: u\n  user: {token: not-a-secret}\n"
    )
    return path, server
