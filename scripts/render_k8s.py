"""Render k8s/ (the kustomize tree) from the Helm chart charts/plinth: the chart is the one
source, k8s/ what `helm template` makes of it with the fixed values below, for people who apply
manifests with kubectl or kustomize. tests/kube_real/test_chart_on_real_cluster.py fails when
k8s/ differs from a fresh rendering.

    python scripts/render_k8s.py            # rewrite k8s/ (needs scripts/kube_binaries.sh's helm)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "plinth"
K8S = REPO / "k8s"
RELEASE = "plinth"
NAMESPACE = "plinth-system"
# Every optional part on, each kustomize folder then holds one of them.
VALUES = [
    "createNamespace=true",
    "monitoring.monitors=true",
    "gpuInventory=true",
    "managedNamespaces.create=true",
    "managedNamespaces.names={plinth-endpoints}",
]
# chart template -> the kustomize folder and file it becomes
PLACES = {
    "namespace.yaml": "base/namespace.yaml",
    "config.yaml": "base/config.yaml",
    "serviceaccounts.yaml": "base/serviceaccount.yaml",
    "migrate-job.yaml": "base/migrate-job.yaml",
    "web.yaml": "base/web.yaml",
    "worker.yaml": "base/worker.yaml",
    "beat.yaml": "base/beat.yaml",
    "gateway.yaml": "base/gateway.yaml",
    "networkpolicy.yaml": "base/networkpolicy.yaml",
    "poddisruptionbudgets.yaml": "base/poddisruptionbudgets.yaml",
    "gpu-inventory.yaml": "gpu-inventory/rbac.yaml",
    "managed-namespaces.yaml": "managed-namespace/managed-namespace.yaml",
    "servicemonitors.yaml": "monitoring/servicemonitors.yaml",
    "podmonitors.yaml": "monitoring/podmonitors.yaml",
    "dashboards.yaml": "monitoring/dashboards.yaml",
}
HEADER = (
    "# Generated from charts/plinth by scripts/render_k8s.py (helm template): edit the chart,\n"
    "# then run that script. Do not edit here.\n"
)
# What each folder is for, at the top of its kustomization.
PURPOSES = {
    "base": "Plinth's control plane in plinth-system: kubectl apply -k k8s/base",
    "gpu-inventory": "Optional: the worker reads nodes and every namespace's pods (GPU inventory)",
    "managed-namespace": "One namespace Plinth deploys endpoints into (copy, change this name)",
    "monitoring": "Prometheus Operator monitors and Grafana dashboards (needs the operator's CRDs)",
}
# A copy of managed-namespace with another name here serves another namespace.
KUSTOMIZE_NAMESPACES = {"base": NAMESPACE, "managed-namespace": "plinth-endpoints"}
SOURCE = re.compile(r"^# Source: [^/]+/templates/(\S+)$", re.MULTILINE)


def helm_binary() -> Path:
    """The pinned helm that scripts/kube_binaries.sh built (it fails when not built)."""
    done = subprocess.run(
        [str(REPO / "scripts" / "kube_binaries.sh"), "--path"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1]) / "helm"


def helm_template(helm: Path, values: list[str], *extra: str) -> str:
    """`helm template` of the chart as release plinth in plinth-system."""
    command = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in values:
        command += ["--set", value]
    done = subprocess.run([*command, *extra], capture_output=True, text=True, check=True)
    return done.stdout


def split_by_template(rendered: str) -> dict[str, str]:
    """The rendering cut at helm's ``# Source:`` lines: template file -> its documents."""
    parts: dict[str, str] = {}
    pieces = SOURCE.split(rendered)
    for name, text in zip(pieces[1::2], pieces[2::2], strict=True):
        text = text.strip().removesuffix("---").strip()
        parts[name] = (parts[name] + "\n---\n" + text) if name in parts else text
    return parts


def kustomization(folder: str, files: list[str]) -> str:
    """A kustomization listing the folder's files (and, for base, the image to pin)."""
    body: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    if folder in KUSTOMIZE_NAMESPACES:
        body["namespace"] = KUSTOMIZE_NAMESPACES[folder]
    if folder == "base":
        body["images"] = [{"name": "ghcr.io/plinth-project/plinth", "newTag": "latest"}]
    return f"{HEADER}# {PURPOSES[folder]}.\n{yaml.safe_dump(body, sort_keys=False)}"


def rendering(helm: Path) -> dict[str, str]:
    """Path under k8s/ -> the text it should hold."""
    parts = split_by_template(helm_template(helm, VALUES))
    unplaced = set(parts) - set(PLACES)
    if unplaced:
        raise SystemExit(f"templates with no place in k8s/: {sorted(unplaced)} (add to PLACES)")
    files = {PLACES[name]: f"{HEADER}{text}\n" for name, text in parts.items()}
    folders: dict[str, list[str]] = {}
    for path in files:
        folder, _, name = path.partition("/")
        folders.setdefault(folder, []).append(name)
    for folder, names in folders.items():
        files[f"{folder}/kustomization.yaml"] = kustomization(folder, names)
    return files


def generated_paths() -> list[Path]:
    """The YAML files now in k8s/, all generated but the example Secrets (written by hand, applied
    by no kustomization: a Secret's value never comes from here)."""
    return sorted(p for p in K8S.rglob("*.yaml") if not p.name.endswith(".example.yaml"))


def main() -> int:
    files = rendering(helm_binary())
    for stale in generated_paths():
        if str(stale.relative_to(K8S)) not in files:
            stale.unlink()
    for relative, text in files.items():
        path = K8S / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} files under {K8S.relative_to(REPO)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
