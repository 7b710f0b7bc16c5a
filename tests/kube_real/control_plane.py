"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built by ``scripts/kube_binaries.sh``, started on free loopback ports.

The API server serves TLS with a certificate of a CA made for this run, authenticates client
certificates (the admin's carries O=system:masters; the controller manager and scheduler have
their own, named as Kubernetes' bootstrap RBAC expects) and ServiceAccount tokens signed by a key
made here, and authorizes with ``Node,RBAC``. kwok plays the kubelet of fake nodes: it marks
them Ready, keeps their leases and drives pods bound to them to Running/Ready, so the real
scheduler, Deployment, ReplicaSet and garbage collector controllers do everything else.
Every process writes its log into the run directory; ``logs()`` gathers them for a failure.
"""

from __future__ import annotations

import base64
import ctypes
import datetime as dt
import ipaddress
import json
import signal
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "kube_binaries.sh"
# The Service IP range; the API server's own Service takes its first address. Every endpoint
# takes two (its engines' and its router's Service): bench/kube_scale.py's thousand need more than
# a /24, whose Services past the 254th the API server refuses (500, the range is full).
SERVICE_RANGE = "10.96.0.0/16"
# Generous: on a loaded 2-core machine the API server takes tens of seconds to get ready.
START_TIMEOUT_S = 240.0
PR_SET_PDEATHSIG = 1  # prctl(2)
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}


def binaries_dir() -> Path:
    """Where ``scripts/kube_binaries.sh`` keeps the binaries of the pinned versions. Never builds
    here (a first build takes far longer than a test may): ``make test`` builds them first."""
    done = subprocess.run(
        [str(BUILD_SCRIPT), "--path"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(
            "the Kubernetes binaries are not built for the pinned versions; run "
            f"scripts/kube_binaries.sh (make test does, first): {done.stderr.strip()}"
        )
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end_with_parent() -> None:
    """In the child before it runs: SIGTERM when the test process dies, however it dies (a CI
    job killed outright), so no control plane outlives its session."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# --- certificates ---


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


ADMIN = _name("plinth-test-admin", "system:masters")


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey = field(default_factory=_key)
    cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        name = _name("plinth-test-ca")
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        subject: x509.Name,
        *,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for a client, or a server when it has names or IPs."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        server = bool(server_names or server_ips)
        usage = x509.oid.ExtendedKeyUsageOID
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([usage.SERVER_AUTH if server else usage.CLIENT_AUTH]),
                critical=False,
            )
        )
        if server:
            alt: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


# --- the processes ---


@dataclass
class ControlPlane:
    """One running control plane; ``start()`` returns once the API server is ready and kwok's
    nodes are Ready. ``stop()`` ends every process it started."""

    run_dir: Path
    bin_dir: Path
    ca: CertificateAuthority = field(default_factory=CertificateAuthority)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api_port: int = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def path(self, name: str) -> Path:
        return self.run_dir / name

    # --- files ---

    def _write(self, name: str, data: bytes | str, *, private: bool = False) -> Path:
        path = self.path(name)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        if private:
            path.chmod(0o600)
        return path

    def kubeconfig(
        self, who: str, *, subject: x509.Name | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig for ``who`` with a client certificate for ``subject`` or a bearer
        ``token``, all inline (``*-data``), as Plinth accepts a tenant's kubeconfig."""
        user: dict[str, str] = {"token": token} if token else {}
        if subject is not None:
            cert, key = self.ca.issue(subject)
            user = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        cluster = {"server": self.url, "certificate-authority-data": _b64(self.ca.pem)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plinth-test", "cluster": cluster}],
            "users": [{"name": who, "user": user}],
            "contexts": [{"name": who, "context": {"cluster": "plinth-test", "user": who}}],
            "current-context": who,
        }
        return self._write(f"{who}.kubeconfig", yaml.safe_dump(config), private=True)

    def _prepare(self) -> dict[str, Path]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write("ca.crt", self.ca.pem)
        cert, key = self.ca.issue(
            _name("kube-apiserver"),
            server_names=("localhost", "kubernetes", "kubernetes.default.svc"),
            server_ips=("127.0.0.1", str(next(ipaddress.ip_network(SERVICE_RANGE).hosts()))),
        )
        sa_key = _key()
        files = {
            "serving_cert": self._write("apiserver.crt", cert),
            "serving_key": self._write("apiserver.key", key, private=True),
            "sa_key": self._write("sa.key", _pem_key(sa_key), private=True),
            "sa_pub": self._write(
                "sa.pub",
                sa_key.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
            ),
        }
        # Names Kubernetes' bootstrap RBAC binds: system:kube-controller-manager, ...-scheduler.
        for who, subject in (
            ("admin", ADMIN),
            ("controller-manager", _name("system:kube-controller-manager")),
            ("scheduler", _name("system:kube-scheduler")),
        ):
            files[who] = self.kubeconfig(who, subject=subject)
        return files

    def _spawn(self, name: str, argv: list[str], *, log_mode: str = "wb") -> None:
        log = self.path(f"{name}.log").open(log_mode)
        self.processes[name] = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.run_dir,
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
        log.close()

    def logs(self, tail: int = 60) -> str:
        """The last ``tail`` lines of every process's log, and how each ended if it did."""
        out = []
        for name, process in self.processes.items():
            lines = self.path(f"{name}.log").read_text(errors="replace").splitlines()[-tail:]
            state = "running" if process.poll() is None else f"exited {process.returncode}"
            out.append(f"---- {name} ({state}) ----\n" + "\n".join(lines))
        return "\n".join(out)

    def _alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited ({process.returncode})\n{self.logs()}")

    def wait(self, check: Callable[[], object], what: str) -> None:
        """Poll ``check`` until it holds; fail at once, with the logs, when a process dies."""

        def alive_and(check: Callable[[], object] = check) -> object:
            self._alive()
            return check()

        wait_until(alive_and, what, START_TIMEOUT_S, interval=0.5, output=self.logs)

    def start(self) -> None:
        self.api_port = free_port()  # before the kubeconfigs, which name it
        files = self._prepare()
        bin_dir = self.bin_dir
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=plinth-test",
                f"--data-dir={self.path('etcd')}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=plinth-test={peer_url}",
                # A test cluster's data is thrown away: never wait for the disk.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        ca = self.path("ca.crt")
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # No reconciler of the ``kubernetes`` Service's endpoints: it refuses loopback,
                # and nothing here reaches the API server through that Service.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.path('apiserver-certs')}",
                f"--tls-cert-file={files['serving_cert']}",
                f"--tls-private-key-file={files['serving_key']}",
                f"--client-ca-file={ca}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={files['sa_pub']}",
                f"--service-account-signing-key-file={files['sa_key']}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                # Bookmarks and compaction happen on Kubernetes' own schedule; nothing to tune.
            ],
        )
        self.wait(self._ready, "the API server is ready (/readyz)")
        manager = files["controller-manager"]
        self._spawn(
            "kube-controller-manager",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={manager}",
                f"--authentication-kubeconfig={manager}",
                f"--authorization-kubeconfig={manager}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={files['sa_key']}",
                f"--root-ca-file={ca}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
            ],
        )
        scheduler = files["scheduler"]
        self._spawn(
            "kube-scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )
        self._spawn(
            "kwok",
            [
                str(bin_dir / "kwok"),
                f"--kubeconfig={files['admin']}",
                f"--config={bin_dir / 'kwok-stages.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector="
                + ",".join(f"{k}={v}" for k, v in KWOK_NODE.items()),
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.255.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )

    def _ready(self) -> bool:
        try:
            self.get("/readyz")
        except (OSError, ValueError):
            return False
        return True

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the admin, for the few calls the tests make outside Plinth's client."""
        if not self.path("admin.crt").exists():
            cert, key = self.ca.issue(ADMIN)
            self._write("admin.crt", cert)
            self._write("admin.key", key, private=True)
        context = ssl.create_default_context(cafile=str(self.path("ca.crt")))
        context.load_cert_chain(self.path("admin.crt"), self.path("admin.key"))
        return context

    def get(self, path: str) -> bytes:
        """GET ``path`` as the admin (raises on an error status)."""
        with urllib.request.urlopen(self.url + path, context=self.ssl_context(), timeout=10) as r:
            return bytes(r.read())

    def restart_api_server(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same flags, etcd
        and every other process left running (as an upgrade or a crash of the API server does
        to its clients); returns once it is ready again. Its log goes on in the same file."""
        process = self.processes["kube-apiserver"]
        argv = process.args
        assert isinstance(argv, list)  # as ``start`` spawned it
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._spawn("kube-apiserver", argv, log_mode="ab")
        self.wait(self._ready, "the restarted API server is ready (/readyz)")

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (as the API server does every few minutes), so
        a watch resuming from an older version is answered 410 Gone; returns the revision."""
        argv = self.processes["etcd"].args
        assert isinstance(argv, list)
        url = next(a.split("=", 1)[1] for a in argv if a.startswith("--listen-client-urls="))

        def post(path: str, body: dict[str, object]) -> dict[str, Any]:
            request = urllib.request.Request(url + path, data=json.dumps(body).encode())
            with urllib.request.urlopen(request, timeout=10) as reply:
                result: dict[str, Any] = json.loads(reply.read())
                return result

        # Any key's range answers with the store's header, which holds its revision.
        revision = int(
            post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
        )
        post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def stop(self) -> None:
        """Stop everything, the API server's clients first, etcd last."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
