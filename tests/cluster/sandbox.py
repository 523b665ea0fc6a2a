"""A pod sandbox made of local processes: env, volumes, /etc/hosts and a private mount namespace.

Isolation, stated once: each container runs as ordinary local processes. Where ``unshare -m``
works (root), they run in a private mount namespace in which the pod's volumes are bind-mounted
at their mountPaths, memory-medium emptyDirs are tmpfs (so ``/dev/shm`` is private) and
``/etc/hosts`` is the pod's own file mapping every Service and Pod name of the namespace to
127.0.0.1. Mount points missing on the host are created there as empty directories (as a
kubelet would on its node). Where ``unshare`` is not available, commands, args and env values
that start with a mountPath are rewritten to the host directory instead, and host names are
not resolvable (MASTER_ADDR-style env values naming a Service are rewritten to 127.0.0.1).
As root, each pod also has its own network and host name (``netns.py``); otherwise the
network is shared and all pods listen on 127.0.0.1. PID and user namespaces are shared.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")


class ConfigError(Exception):
    """A container cannot be configured yet (CreateContainerConfigError)."""


class Lookup(Protocol):
    """What the sandbox reads from the API server (the kubelet answers)."""

    def object(self, ns: str, plural: str, name: str) -> dict[str, Any] | None: ...

    def token(self, pod: dict[str, Any], audience: str, seconds: int) -> str: ...


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: unknown references stay as written, ``$$`` -> ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def _ref_value(store: Lookup, ns: str, plural: str, ref: dict[str, Any]) -> str | None:
    obj = store.object(ns, plural, ref["name"])
    kind = "secret" if plural == "secrets" else "configmap"
    if obj is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'{kind} "{ref["name"]}" not found')
    data = obj.get("data") or {}
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise ConfigError(
            f"couldn't find key {ref['key']} in {kind.capitalize()} {ns}/{ref['name']}"
        )
    value = data[ref["key"]]
    return base64.b64decode(value).decode() if plural == "secrets" else str(value)


def container_env(
    store: Lookup, pod: dict[str, Any], container: dict[str, Any], base: dict[str, str]
) -> dict[str, str]:
    ns = pod["metadata"]["namespace"]
    env = dict(base)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for plural, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            if key in src:
                ref = src[key]
                obj = store.object(ns, plural, ref["name"])
                if obj is None:
                    if ref.get("optional"):
                        continue
                    raise ConfigError(f'{plural[:-1]} "{ref["name"]}" not found')
                for k, v in (obj.get("data") or {}).items():
                    env[prefix + k] = base64.b64decode(v).decode() if plural == "secrets" else v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        vf = item["valueFrom"]
        value: str | None = None
        if "secretKeyRef" in vf:
            value = _ref_value(store, ns, "secrets", vf["secretKeyRef"])
        elif "configMapKeyRef" in vf:
            value = _ref_value(store, ns, "configmaps", vf["configMapKeyRef"])
        elif "fieldRef" in vf:
            value = field_ref(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            value = "0"
        if value is not None:
            env[name] = value
    return env


def field_ref(pod: dict[str, Any], path: str) -> str:
    """The downward API's value for ``fieldPath`` (env and downwardAPI volumes)."""
    meta = pod["metadata"]
    m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m[1]) or {}).get(m[2], ""))
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": (pod.get("status") or {}).get("podIP", "127.0.0.1"),
        "status.hostIP": "127.0.0.1",
    }
    return str(values.get(path, ""))


def _write_items(
    target: Path,
    data: dict[str, str],
    items: list[dict[str, Any]] | None,
    b64: bool,
    default_mode: int = 0o644,
) -> None:
    """Files of a ConfigMap/Secret with their modes (``items[].mode``, else ``defaultMode``):
    the MPI controller's ``kubexec.sh`` must be executable."""
    target.mkdir(parents=True, exist_ok=True)
    pairs = (
        [(i["key"], i["path"], i.get("mode")) for i in items]
        if items
        else [(k, k, None) for k in data]
    )
    for key, rel, mode in pairs:
        if key not in data:
            continue
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        raw = base64.b64decode(data[key]) if b64 else str(data[key]).encode()
        if dest.exists():
            dest.chmod(0o644)  # a restarted pod rewrites its files
        dest.write_bytes(raw)
        dest.chmod(default_mode if mode is None else int(mode))


def _projected(store: Lookup, pod: dict[str, Any], src: dict[str, Any], target: Path) -> None:
    """A projected volume: service-account token (TokenRequest), ConfigMaps, Secrets and
    downward API files in one folder, as the kubelet assembles ``kube-api-access-*``."""
    ns = pod["metadata"]["namespace"]
    target.mkdir(parents=True, exist_ok=True)
    for part in src.get("sources") or []:
        if "serviceAccountToken" in part:
            t = part["serviceAccountToken"]
            token = store.token(pod, t.get("audience", ""), int(t.get("expirationSeconds", 3607)))
            (target / t["path"]).write_text(token)
        elif "configMap" in part or "secret" in part:
            is_secret = "secret" in part
            ref = part["secret" if is_secret else "configMap"]
            obj = store.object(ns, "secrets" if is_secret else "configmaps", ref["name"])
            if obj is None and not ref.get("optional"):
                kind = "secret" if is_secret else "configmap"
                raise ConfigError(f'{kind} "{ref["name"]}" not found')
            mode = int(ref.get("defaultMode", src.get("defaultMode", 0o644)))
            _write_items(target, (obj or {}).get("data") or {}, ref.get("items"), is_secret, mode)
        elif "downwardAPI" in part:
            for item in part["downwardAPI"].get("items") or []:
                if "fieldRef" in item:
                    dest = target / item["path"]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(field_ref(pod, item["fieldRef"]["fieldPath"]))


def prepare_volumes(
    store: Lookup, pod: dict[str, Any], sandbox: Path, pvc_root: Path
) -> dict[str, tuple[str, Path | None, str]]:
    """name -> (kind, host dir or None for tmpfs, tmpfs size option)."""
    ns = pod["metadata"]["namespace"]
    out: dict[str, tuple[str, Path | None, str]] = {}
    for vol in pod["spec"].get("volumes") or []:
        name = vol["name"]
        target = sandbox / "volumes" / name
        if "configMap" in vol:
            src = vol["configMap"]
            obj = store.object(ns, "configmaps", src["name"])
            if obj is None and not src.get("optional"):
                raise ConfigError(f'configmap "{src["name"]}" not found')
            mode = int(src.get("defaultMode", 0o644))
            _write_items(target, (obj or {}).get("data") or {}, src.get("items"), False, mode)
            out[name] = ("dir", target, "")
        elif "secret" in vol:
            src = vol["secret"]
            obj = store.object(ns, "secrets", src["secretName"])
            if obj is None and not src.get("optional"):
                raise ConfigError(f'secret "{src["secretName"]}" not found')
            mode = int(src.get("defaultMode", 0o644))
            _write_items(target, (obj or {}).get("data") or {}, src.get("items"), True, mode)
            out[name] = ("dir", target, "")
        elif "projected" in vol:
            _projected(store, pod, vol["projected"], target)
            out[name] = ("dir", target, "")
        elif "persistentVolumeClaim" in vol:
            claim = pvc_root / ns / vol["persistentVolumeClaim"]["claimName"]
            claim.mkdir(parents=True, exist_ok=True)
            out[name] = ("dir", claim, "")
        elif "emptyDir" in vol and (vol["emptyDir"] or {}).get("medium") == "Memory":
            size = str((vol["emptyDir"] or {}).get("sizeLimit", ""))
            m = re.match(r"^(\d+)(Ki|Mi|Gi|Ti)?$", size)
            opt = f"size={m[1]}{(m[2] or '')[:1].lower()}" if m else ""
            out[name] = ("tmpfs", None, opt)
        else:  # emptyDir on disk, hostPath and anything else: a private directory
            host = vol.get("hostPath", {}).get("path")
            if host and Path(host).exists():
                out[name] = ("dir", Path(host), "")
            else:
                target.mkdir(parents=True, exist_ok=True)
                out[name] = ("dir", target, "")
    return out


def hosts_file(
    addresses: dict[str, dict[str, str]], ns: str, path: Path, own: list[str], own_ip: str
) -> None:
    """Write the pod's /etc/hosts in place (the bind mount keeps the inode): every Service and
    Pod name (and ``hostname.subdomain``) resolves to its address (``addresses``: namespace ->
    name -> IP, the kubelet's), as cluster DNS would: short names of the pod's own namespace,
    ``name.namespace.svc`` forms of every namespace (a Trainer pod reaches its controller's
    Service that way); the pod's own host name (and FQDN, ``own``) to its own address, as the
    kubelet's line for the pod (Gloo finds its interface by resolving the host name)."""
    by_ip: dict[str, set[str]] = {"127.0.0.1": {"localhost"}}
    by_ip.setdefault(own_ip, set()).update(own)
    if own_ip == "127.0.0.1":  # pods share this machine's network (and host name)
        by_ip["127.0.0.1"].add(socket.gethostname())
    for space, in_space in addresses.items():
        for n, ip in in_space.items():
            names = by_ip.setdefault(ip, set())
            if space == ns:
                names.add(n)
            names.update({f"{n}.{space}", f"{n}.{space}.svc", f"{n}.{space}.svc.cluster.local"})
    lines = [f"{ip}\t{' '.join(sorted(names))}\n" for ip, names in sorted(by_ip.items())]
    text = "".join(lines) + "::1\tlocalhost ip6-localhost\n"
    if not path.exists() or path.read_text() != text:
        with path.open("r+" if path.exists() else "w") as fh:
            fh.seek(0)
            fh.write(text)
            fh.truncate()


def resolv_conf(ns: str, path: Path) -> None:
    """The pod's /etc/resolv.conf, as the kubelet writes it for ``dnsPolicy: ClusterFirst``,
    for a pod with a network of its own (``netns.py``): /etc/hosts stands in for the cluster
    DNS, so the name server is none that answers (a resolver that asks DNS first, such as
    gRPC's c-ares, is refused at once rather than waiting on this machine's unreachable one).
    Beside it, ``nsswitch.conf`` (mounted with it): host names from /etc/hosts alone, which
    answers as the cluster DNS would: a name or address it lacks is unknown (NXDOMAIN), not a
    failure to retry (a refused name server reads as one: c10d warns on each peer)."""
    path.write_text(
        f"search {ns}.svc.cluster.local svc.cluster.local cluster.local\n"
        "nameserver 127.0.0.1\noptions ndots:5\n"
    )
    host = Path("/etc/nsswitch.conf")
    lines = host.read_text().splitlines() if host.exists() else []
    kept = [ln for ln in lines if not ln.startswith("hosts:")]
    path.with_name("nsswitch.conf").write_text("\n".join([*kept, "hosts: files"]) + "\n")


SHIMS = Path(__file__).resolve().parent / "shims"
HOST_HOME = os.environ.get("HOME", "/root")


def base_env(pod: dict[str, Any], api_port: int, api_host: str = "127.0.0.1") -> dict[str, str]:
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))  # PATH may hold a relative venv
    return {
        "PATH": f"{SHIMS}:{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": HOST_HOME,
        "LANG": "C.UTF-8",
        "HOSTNAME": pod["metadata"]["name"],
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        # Every pod here is on this machine, so Open MPI would take each host of an MPIJob's
        # hostfile for the launcher's own node (and refuse the hostfile); told not to resolve
        # names, it starts its daemon on each through the rsh agent (kubexec.sh), as on a cluster.
        "OMPI_MCA_if_base_do_not_resolve": "1",
    }


def _overlays(dests: list[str]) -> list[str]:
    """Existing host folders to cover with a pod-private overlay, so that mount points missing
    on the host (``/var/run/secrets/kubernetes.io/serviceaccount``, ``/opt/kube``) are made in
    the pod's view only: a host that grew ``/var/run/secrets`` would look, to every client on
    it, like a pod. Top-level mount points (``/ktrain``, ``/data``) are still made on the host."""
    out: set[str] = set()
    for dst in dests:
        path = Path(dst)
        while not path.exists():
            path = path.parent
        if str(path) != str(Path(dst)) and str(path) != "/":
            out.add(str(path.resolve()))
    return sorted(p for p in out if not any(p.startswith(o + "/") for o in out))


def mount_script(
    mounts: list[tuple[str, Path | None, str, str, bool]],
    hosts: Path | None,
    workdir: str,
    scratch: Path,
    resolv: Path | None = None,
    tmp: Path | None = None,
    shared: Path | None = None,
) -> str:
    """sh script run inside ``unshare -m``: (kind, src, opt, mountPath, readOnly) -> mounts,
    then the pod's /etc/hosts and /etc/resolv.conf (when given) and its working directory.

    With ``tmp``, the container's own /tmp (a folder of its own, fresh each start, as its
    writable layer would be) is mounted first; sources in this machine's /tmp (the kubelet's
    folders, often) are then reached through a descriptor of that /tmp held meanwhile.
    ``shared``, a folder of this machine's /tmp, stays visible at its path."""
    q = shlex.quote

    def src(path: Path | str) -> str:
        p = str(path)
        if tmp is not None and (p == "/tmp" or p.startswith("/tmp/")):
            return '"$H"' + q(p[len("/tmp") :]) if p != "/tmp" else '"$H"'
        return q(p)

    lines = ["set -e"]
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        lines += ["exec 9</tmp", "H=/proc/$$/fd/9", f"mount --bind {q(str(tmp))} /tmp"]
        if shared is not None and str(shared).startswith("/tmp/"):
            lines += [
                f"mkdir -p {q(str(shared))}",
                f"mount -c --bind {src(shared)} {q(str(shared))}",
            ]
    in_tmp = [m[3] for m in mounts if m[3] == "/tmp" or m[3].startswith("/tmp/")]
    for i, base in enumerate(
        _overlays([m[3] for m in mounts if tmp is None or m[3] not in in_tmp])
    ):
        up, work = scratch / f"overlay-{i}" / "up", scratch / f"overlay-{i}" / "work"
        up.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        opts = f"lowerdir={src(base)},upperdir={src(up)},workdir={src(work)}"
        lines.append(f"mount -t overlay overlay -o {opts} {q(base)}")
    for kind, source, opt, dst, ro in mounts:
        lines.append(f"mkdir -p {q(dst)}")
        if kind == "tmpfs":
            lines.append(f"mount -t tmpfs {'-o ' + q(opt) + ' ' if opt else ''}tmpfs {q(dst)}")
        else:
            lines.append(f"mount -c --bind {src(str(source))} {q(dst)}")
        if ro:
            lines.append(f"mount -o remount,bind,ro {q(dst)}")
    if hosts is not None:
        lines.append(f"mount -c --bind {src(hosts)} /etc/hosts")
    if resolv is not None:  # and the nsswitch.conf beside it (resolv_conf)
        lines.append(f"mount -c --bind {src(resolv)} /etc/resolv.conf")
        lines.append(f"mount -c --bind {src(resolv.with_name('nsswitch.conf'))} /etc/nsswitch.conf")
    if tmp is not None:
        lines.append("exec 9<&-")
    lines.append(f"cd {q(workdir)} 2>/dev/null || cd /")
    lines.append('exec "$@"')
    return "\n".join(lines)


def rewrite(value: str, mounts: list[tuple[str, Path | None, str, str, bool]]) -> str:
    """Fallback without a mount namespace: mountPath prefixes -> host directories."""
    for _, src, _, dst, _ in sorted(mounts, key=lambda m: -len(m[3])):
        if src is not None and (value == dst or value.startswith(dst.rstrip("/") + "/")):
            return str(src) + value[len(dst.rstrip("/")) :]
    return value
