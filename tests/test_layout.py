"""The house's own rules, checked over every module so they stay kept (issue 26):

- no module imports another module's private name (a leading underscore): a seam that two
  modules share is a public name of one of them;
- no product module is over 600 lines (generated ones aside): split by noun before that;
- the module graph has no cycle, now that packages by noun may use each other's public modules;
- every Celery task name the code sends by name is a registered task;
- every dotted name of ours that a docstring, a comment or a document names exists.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterator

import grimp
import pytest

from tests.controlplane.source_tree import ROOT, Source, sources

PRODUCT = ("controlplane", "deployments", "gateway", "runtime", "sdk/plinth")
OURS = ("controlplane", "deployments", "gateway", "runtime", "plinth")
# Generated (it says "do not edit"): its size follows the API's schema.
GENERATED = {"sdk/plinth/models.py"}
MAX_LINES = 600
# Django's own "private" API that every Django project uses.
PRIVATE_OK = {"_meta"}


def _module_name(source: Source) -> str:
    parts = list(source.path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "sdk":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _absolute(source: Source, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _module_name(source).split(".")
    package = base if source.path.name == "__init__.py" else base[:-1]
    head = package[: len(package) - node.level + 1]
    return ".".join([*head, node.module] if node.module else head)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PRIVATE_OK


def _crossings(source: Source) -> Iterator[str]:
    """``from ours import _name`` and ``module._name`` where ``module`` is one of ours."""
    modules: set[str] = set()  # local names bound to a module of ours
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(source, node)
            if module.split(".")[0] not in OURS:
                continue
            for alias in node.names:
                if _private(alias.name):
                    yield f"{source.name}:{node.lineno} imports {module}.{alias.name}"
                elif _is_module(f"{module}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(source.tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
        ):
            yield f"{source.name}:{node.lineno} reads {node.value.id}.{node.attr}"


def test_no_module_imports_another_modules_private_name() -> None:
    found = [line for source in sources(*PRODUCT) for line in _crossings(source)]
    assert not found, "make the shared name public where it is defined:\n" + "\n".join(found)


def test_no_product_module_is_over_600_lines() -> None:
    roots = (*PRODUCT, "bench", "scripts")
    long = [
        f"{source.name}: {lines} lines"
        for source in sources(*roots)
        if source.name not in GENERATED
        and (lines := len(source.path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, "split these by noun:\n" + "\n".join(long)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    imported = graph.find_modules_directly_imported_by(child)
                    work.append((child, iter(sorted(imported))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_module_graph_has_no_cycle() -> None:
    graph = grimp.build_graph("controlplane", "deployments", "gateway", "runtime")
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other (directly or round a loop):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check above is only as good as its search: a loop of three modules is found."""
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z", "a.w"):
        graph.add_module(name)
    for importer, imported in (("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.w", "a.x")):
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["a.x", "a.y", "a.z"]]


_TASK_NAME = re.compile(r"deployments\.[a-z_]+")


def _task_names_sent() -> set[str]:
    """Every string constant of the form "deployments.<name>" that the code sends or routes:
    the task names in product code and the settings (beat, routes)."""
    sent: set[str] = set()
    for source in sources("controlplane", "deployments", "gateway"):
        for node in ast.walk(source.tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and _TASK_NAME.fullmatch(text) and not _is_module(text):
                sent.add(text)
    return sent


def test_every_task_name_sent_is_registered() -> None:
    import deployments.tasks  # noqa: F401  (Celery's discovery module: registers every task)
    from controlplane.celery import app

    sent = _task_names_sent()
    assert "deployments.reconcile_deployment" in sent  # the scan finds what is sent
    missing = sorted(name for name in sent if name not in app.tasks)
    assert not missing, f"sent by name but no task has it: {missing}"


# A dotted name of ours in prose: controlplane.x, deployments.y.z, runtime.w, gateway.v, plinth.u.
_DOTTED = re.compile(
    r"(?<![\w/.-])((?:controlplane|deployments|runtime|gateway|plinth)(?:\.[A-Za-z_]\w*)+)"
)
DOCS = ("README.md", "docs/layout.md", "charts/plinth/README.md", "k8s/README.md")


def _prose(source: Source) -> Iterator[tuple[int, str]]:
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                line = node.body[0].lineno if node.body else 1
                yield line, text
    for number, line in enumerate(source.path.read_text(encoding="utf-8").splitlines(), 1):
        if "#" in line:
            yield number, line[line.index("#") :]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if not _is_module(module):
            continue
        target: object = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def _accepted(dotted: str, task_names: set[str]) -> bool:
    """Names that are not module paths: Celery task names, model labels, RuntimeSpec field paths
    (``runtime.image``), host names (``plinth.dev``)."""
    from django.apps import apps

    from runtime.spec import RuntimeSpec

    if dotted in task_names or dotted.startswith("plinth.dev") or dotted.endswith(".com"):
        return True
    app, _, rest = dotted.partition(".")
    if "." not in rest:
        try:
            apps.get_model(app, rest)
            return True
        except (LookupError, ValueError):
            pass
    if app == "runtime":
        field = RuntimeSpec.model_fields.get("runtime")
        return field is not None and rest.split(".")[0] in getattr(
            field.annotation, "model_fields", {}
        )
    return False


def _named() -> Iterator[tuple[str, str]]:
    for source in sources(*PRODUCT):
        for line, text in _prose(source):
            for match in _DOTTED.finditer(text):
                yield f"{source.name}:{line}", match.group(1).rstrip(".")
    for doc in DOCS:
        path = ROOT / doc
        if path.exists():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for match in _DOTTED.finditer(line):
                    yield f"{doc}:{number}", match.group(1).rstrip(".")


@pytest.mark.django_db
def test_every_dotted_name_the_docs_name_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "sdk"))  # the SDK's ``plinth``, not installed here
    tasks = _task_names_sent()
    missing = sorted(
        f"{where}: {dotted}"
        for where, dotted in _named()
        if not _resolves(dotted) and not _accepted(dotted, tasks)
    )
    assert not missing, "named in prose but not in the code:\n" + "\n".join(missing)


_MODEL_FIELD = re.compile(r"``([A-Z]\w+)\.([a-z_]\w*)``")


@pytest.mark.django_db
def test_every_model_field_the_docs_name_exists() -> None:
    """``Cluster.operator_settings`` in prose names a field (or attribute) of one of our models."""
    from django.apps import apps

    models = {m.__name__: m for m in apps.get_models() if m.__module__.split(".")[0] in OURS}
    missing = []
    for source in sources(*PRODUCT):
        for line, text in _prose(source):
            for model, name in _MODEL_FIELD.findall(text):
                if model in models and not hasattr(models[model], name):
                    field_names = {f.name for f in models[model]._meta.get_fields()}
                    if name not in field_names:
                        missing.append(f"{source.name}:{line}: {model}.{name}")
    assert not missing, "named in prose but not a field:\n" + "\n".join(missing)


def test_the_dotted_name_check_catches_a_name_that_does_not_exist() -> None:
    assert _resolves("deployments.endpoints.services.create_deployment")
    assert not _resolves("deployments.experiments.quality.services.revision_allowed")
    assert not _resolves("deployments.quality_services")
