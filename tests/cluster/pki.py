"""Certificates for the test cluster, made with the ``openssl`` CLI: one CA, and leaf certificates
for the API server, its client identities (admin, the API server towards kubelets), the
service-account signing key, the kubelet's serving certificate and the webhook servers."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, stdin: str | None = None) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, input=stdin, text=True)


def _pkcs1(key: Path) -> None:
    """RSA keys in PKCS#1 form: the webhook certificate rotator parses only that."""
    _openssl("rsa", "-in", str(key), "-out", str(key), "-traditional")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Pki:
    """A CA in ``directory``; ``issue`` signs server or client leaf certificates with it."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = Pair(directory / "ca.crt", directory / "ca.key")
        if not self.ca.cert.exists():
            _openssl(
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3650",
                "-keyout",
                str(self.ca.key),
                "-out",
                str(self.ca.cert),
                "-subj",
                "/CN=ktrain-test-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
            )
            _pkcs1(self.ca.key)

    def issue(
        self,
        name: str,
        cn: str,
        *,
        org: str = "",
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        client: bool = False,
    ) -> Pair:
        pair = Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        if pair.cert.exists():
            return pair
        csr = self.dir / f"{name}.csr"
        subj = f"/CN={cn}" + (f"/O={org}" if org else "")
        _openssl(
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(pair.key),
            "-out",
            str(csr),
            "-subj",
            subj,
        )
        _pkcs1(pair.key)
        sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        ext = self.dir / f"{name}.ext"
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(self.ca.cert),
            "-CAkey",
            str(self.ca.key),
            "-CAcreateserial",
            "-days",
            "3650",
            "-out",
            str(pair.cert),
            "-extfile",
            str(ext),
        )
        return pair

    def keypair(self, name: str) -> Pair:
        """An RSA key and its public half (the service-account token signing key)."""
        pair = Pair(self.dir / f"{name}.pub", self.dir / f"{name}.key")
        if not pair.key.exists():
            _openssl("genrsa", "-out", str(pair.key), "2048")
            _openssl("rsa", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair
