"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, built by ``scripts/kube_binaries.sh``, started on free loopback ports.

The API server serves TLS with a certificate of a CA made for this run, authenticates client
certificates (the admin's carries O=system:masters; the controller manager and scheduler have
their own, named as Kubernetes' bootstrap RBAC expects) and ServiceAccount tokens signed by a key
made here, and authorizes with ``Node,RBAC``. kwok plays the kubelet of fake nodes: it marks
them Ready, keeps their leases and drives pods bound to them to Running/Ready, so the real
scheduler, Deployment, ReplicaSet and garbage collector controllers do everything else.
The LeaderWorkerSet controller (``_start_lws``) runs beside them as a local process with the
release's own CRDs, ClusterRole and webhooks, the API server calling its webhooks by URL.
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
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
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
# Where LWS's own manifests (config/default) put its controller: namespace, ServiceAccount.
LWS_NAMESPACE = "lws-system"
LWS_ACCOUNT = "lws-controller-manager"
LWS_CERT_RESOURCES = {
    "secrets",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
}
# The label LWS puts on every pod of a group; its pod webhooks only see such pods
# (config/webhook/mutating-patch.yaml and validating-patch.yaml in the release).
LWS_POD_SELECTOR = {
    "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
}


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


def _documents(path: Path) -> list[dict[str, Any]]:
    # libyaml's loader: LWS's CRDs are ~3 MB of YAML.
    return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]


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
    # Stages files kwok reads besides the release's (tests' own failures made on demand).
    kwok_stages: tuple[Path, ...] = ()
    # The stopped API server's command line (``stop_api_server``), for ``start_api_server``.
    _api_server_argv: list[str] = field(default_factory=list)

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
                *(f"--config={stages}" for stages in self.kwok_stages),
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector="
                + ",".join(f"{k}={v}" for k, v in KWOK_NODE.items()),
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.255.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )
        self._start_lws()

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

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` as the admin; the reply (raises on an error status)."""
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as reply:
            result: dict[str, Any] = json.loads(reply.read())
            return result

    # --- the LeaderWorkerSet controller ---

    def _start_lws(self) -> None:
        """LWS as its release installs it (config/default), but as a local process: its CRDs,
        its ClusterRole bound to its own ServiceAccount (whose token it runs with), and its
        webhooks (LWS defaulting and validation, and the pod webhook that labels a group's pods
        and gives them LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX) served on loopback
        with a certificate of this run's CA, registered by URL. Leader election is off (one
        replica), and so is its internal certificate management, which would write a Secret
        and patch the webhook configurations for an in-cluster Service that does not exist."""
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in _documents(self.bin_dir / "lws-crds.yaml"):
            self.post(crds, crd)
            path = f"{crds}/{crd['metadata']['name']}"
            self.wait(partial(self._established, path), f"{path} is established")
        kubeconfig = self._lws_identity()
        port = free_port()
        certs = self.path("lws-certs")
        certs.mkdir()
        cert, key = self.ca.issue(_name("lws-webhook"), server_ips=("127.0.0.1",))
        (certs / "tls.crt").write_bytes(cert)
        (certs / "tls.key").write_bytes(key)
        (certs / "tls.key").chmod(0o600)
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},  # "0": not served
            "health": {"healthProbeBindAddress": "0"},
        }
        self._write("lws-config.yaml", yaml.safe_dump(config))
        self._spawn(
            "lws-controller",
            [
                str(self.bin_dir / "lws-controller"),
                f"--kubeconfig={kubeconfig}",
                f"--config={self.path('lws-config.yaml')}",
            ],
        )
        webhooks = f"https://127.0.0.1:{port}"
        self.wait(partial(self._serving, webhooks), f"LWS's webhooks answer at {webhooks}")
        for configuration in _documents(self.bin_dir / "lws-webhooks.yaml"):
            plural = configuration["kind"].lower() + "s"
            self.post(
                f"/apis/admissionregistration.k8s.io/v1/{plural}",
                self._by_url(configuration, webhooks),
            )

    def _lws_identity(self) -> Path:
        """A kubeconfig with a token of LWS's ServiceAccount, bound to the release's own
        ClusterRole (config/rbac/role.yaml) less what it needs for its certificates only."""
        self.post("/api/v1/namespaces", {"metadata": {"name": LWS_NAMESPACE}})
        self.post(
            f"/api/v1/namespaces/{LWS_NAMESPACE}/serviceaccounts",
            {"metadata": {"name": LWS_ACCOUNT}},
        )
        (role,) = _documents(self.bin_dir / "lws-role.yaml")
        role["metadata"]["name"] = "lws-manager-role"  # the release's kustomize namePrefix
        # Only its internal certificate management (off here) reads Secrets and rewrites the
        # webhook configurations (pkg/cert's RBAC markers): those rules are left out.
        role["rules"] = [r for r in role["rules"] if not set(r["resources"]) <= LWS_CERT_RESOURCES]
        self.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
        binding = {
            "metadata": {"name": "lws-manager-rolebinding"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "lws-manager-role",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": LWS_ACCOUNT, "namespace": LWS_NAMESPACE}
            ],
        }
        self.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        request = {"spec": {"expirationSeconds": 24 * 3600}}
        path = f"/api/v1/namespaces/{LWS_NAMESPACE}/serviceaccounts/{LWS_ACCOUNT}/token"
        token = str(self.post(path, request)["status"]["token"])
        return self.kubeconfig("lws-controller", token=token)

    def _by_url(self, configuration: dict[str, Any], base_url: str) -> dict[str, Any]:
        """The release's webhook configuration (config/webhook/manifests.yaml) calling
        ``base_url`` directly, with the pod webhooks' object selector its kustomize patches add."""
        configuration["metadata"]["name"] = "lws-" + configuration["metadata"]["name"]
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": _b64(self.ca.pem)}
            if any("pods" in rule["resources"] for rule in webhook["rules"]):
                webhook["objectSelector"] = LWS_POD_SELECTOR
        return configuration

    def _established(self, path: str) -> bool:
        conditions = json.loads(self.get(path)).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _serving(self, url: str) -> bool:
        """Whether a TLS server with this run's certificate answers at ``url`` (any status)."""
        context = ssl.create_default_context(cafile=str(self.path("ca.crt")))
        try:
            urllib.request.urlopen(url, context=context, timeout=5).close()
        except urllib.error.HTTPError:
            return True  # it answered: no handler at "/"
        except OSError:
            return False
        return True

    def restart_api_server(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same flags, etcd
        and every other process left running (as an upgrade or a crash of the API server does
        to its clients); returns once it is ready again. Its log goes on in the same file."""
        self.stop_api_server()
        self.start_api_server()

    def stop_api_server(self) -> None:
        """Stop kube-apiserver alone (a cluster whose API server is lost); etcd, the
        controllers and kwok's pods stay as they are."""
        process = self.processes["kube-apiserver"]
        argv = process.args
        assert isinstance(argv, list)  # as ``start`` spawned it
        self._api_server_argv = argv
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def start_api_server(self) -> None:
        """Start the stopped kube-apiserver again as it was; returns once it is ready."""
        self._spawn("kube-apiserver", self._api_server_argv, log_mode="ab")
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
        """Stop everything. Killed, not asked: nothing of a test's cluster is kept, and asked,
        the LeaderWorkerSet controller waits 5 s on its informers' caches and an API server
        that has been restarted does not end within 20 s."""
        for name in reversed(list(self.processes)):  # the API server's clients first, etcd last
            process = self.processes[name]
            if process.poll() is None:
                process.kill()
                process.wait()
