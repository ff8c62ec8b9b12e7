"""The architecture, checked: each layer imports only the layers below it, and Ray stays at the edge.

    cli -> _cluster (wiring) -> _keeper -> sync_client -> client -> features (named, flows) -> runtime -> model -> storage
    handlers -> cluster.model

Every import counts, also one inside a function: a lazy import that runs against the layers is
still a cycle waiting to happen.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "handlers", "storage")

# Higher ranks may import lower ones. Features share a rank but may not import each other.
RANKS: dict[str, float] = {
    "cluster": 8,  # the public facade: nothing inside the project may import it
    "cluster.cli": 7,
    "cluster._cluster": 6,
    "cluster._keeper": 5.8,  # what the keeper actor does; the wiring (its actor class) hands it a Cluster
    "cluster.sync_client": 5.5,  # the client, blocking: wraps it, and the wiring hands it out
    "cluster.client": 5,
    "cluster.features": 5,  # the features' hooks, composed for every silo (Ray-free)
    "cluster.named": 4,
    "cluster.flows": 4,
    "cluster.runtime": 3,
    "cluster.model": 2,
    "handlers": 2,
    "storage": 1,
}
# Where a Ray call is made, and so the only modules that may import Ray.
RAY_ALLOWED = {"cluster.runtime.ray_transport", "cluster.runtime.ray_metrics", "cluster.client", "cluster._cluster",
               "cluster._keeper"}


def layer(module: str) -> str:
    """The layer a dotted module name belongs to: its longest prefix in ``RANKS``."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RANKS:
            return prefix
    raise KeyError(module)


def modules() -> list[tuple[str, Path]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out.append((name.removesuffix(".__init__"), path))
    return out


def imports(module: str, path: Path) -> list[str]:
    """Every module ``path`` imports, absolute, wherever the import statement stands."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append(base)
            # `from cluster import named` imports a module, not a name: check it as such.
            found += [f"{base}.{alias.name}" for alias in node.names if base in PACKAGES]
    return found


def allowed(importer: str, imported: str) -> bool:
    src, dst = layer(importer), layer(imported)
    if src == dst:
        return True
    if src == "cluster":  # the facade re-exports from everywhere below it
        return True
    if src == "handlers":
        return dst in ("cluster.model", "handlers")
    if RANKS[src] == RANKS[dst]:
        return False  # one feature never imports another
    return RANKS[dst] < RANKS[src]


def test_every_import_points_down_the_layers() -> None:
    wrong = []
    for module, path in modules():
        for imported in imports(module, path):
            top = imported.split(".")[0]
            if top not in PACKAGES:
                continue
            try:
                ok = allowed(module, imported)
            except KeyError:
                ok = False
            if not ok:
                wrong.append(f"{module} imports {imported}")
    assert wrong == []


def test_ray_is_imported_only_where_a_ray_call_is_made() -> None:
    wrong = [
        module for module, path in modules()
        if any(i.split(".")[0] == "ray" for i in imports(module, path))
        and module not in RAY_ALLOWED and layer(module) != "cluster.cli"
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("importer", "imported", "ok"),
    [
        ("cluster.runtime.silo", "cluster.named.hooks", False),  # the runtime pulling a feature in
        ("cluster.named.api", "cluster.client", False),  # a feature depending on the client
        ("cluster.flows.hooks", "cluster.named.registry", False),  # a feature importing another
        ("handlers.base", "cluster.runtime.silo", False),
        ("storage.log", "cluster.model.wire", False),
        ("storage.generations", "cluster.model.wire", False),
        ("storage.generations", "cluster.model.wire", False),
        ("cluster.model.jobs", "cluster", False),  # the facade, from inside
        ("cluster.client", "cluster.named.api", True),
        ("cluster.runtime.firing", "storage", True),
    ],
)
def test_the_rule_itself_rejects_what_it_must(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok
