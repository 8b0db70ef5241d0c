"""The floors hold: no module imports from a layer above its own.

kernel (metadata_quorum/kernel: errors, strict config, back-off, HTTP parsing, auth, validators, the
object-key contract) < metadata_quorum < stream_storage < broker < tools. Stream storage knows the
quorum only through the kernel and its own ``StreamControl`` seam, never the quorum's image,
records or controllers. Every import counts, including those inside functions.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "metadata_quorum.kernel"


def _floor(module: str) -> str:
    if module == KERNEL or module.startswith(KERNEL + "."):
        return "kernel"
    return module.split(".")[0]


ALLOWED = {
    "kernel": {"kernel"},
    "metadata_quorum": {"kernel", "metadata_quorum"},
    "stream_storage": {"kernel", "stream_storage"},
    "broker": {"kernel", "metadata_quorum", "stream_storage", "broker"},
    "tools": {"kernel", "metadata_quorum", "stream_storage", "broker", "tools"},
}
PROJECT = {"metadata_quorum", "stream_storage", "broker", "tools"}


def _imports(path: str, module: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = module.split(".")[:-node.level]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append(target)
            out += [f"{target}.{a.name}" for a in node.names]  # `from metadata_quorum import kernel`
    return [m for m in out if m.split(".")[0] in PROJECT]


def _modules() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for package in sorted(PROJECT):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found.append((path, rel.removesuffix(".__init__")))
    return found


def _violations_of(module: str, imported: list[str]) -> list[str]:
    floor = _floor(module)
    bad: list[str] = []
    for name in imported:
        if name == "metadata_quorum":  # the bare namespace (its __init__ imports nothing); submodules are checked
            continue
        target = _floor(name)
        if target not in ALLOWED[floor]:
            bad.append(f"{module} ({floor}) imports {name} ({target})")
    return bad


def _violations() -> list[str]:
    return sorted({v for path, module in _modules() for v in _violations_of(module, _imports(path, module))})


def test_no_module_imports_from_a_floor_above_its_own() -> None:
    assert _violations() == []


def test_the_check_sees_a_violation() -> None:
    """The rule is not vacuous: upward imports, and stream storage reaching into the quorum, are reported."""
    assert len(_modules()) > 200
    assert _violations_of("stream_storage.wal_gc", ["metadata_quorum.image"])
    assert _violations_of("stream_storage.wal_gc", ["metadata_quorum.records.STREAM_OPENED"])
    assert _violations_of("metadata_quorum.kernel.errors", ["metadata_quorum.records"])
    assert _violations_of("metadata_quorum.ops.streams", ["broker.server"])
    assert not _violations_of("stream_storage.uploader", ["metadata_quorum.kernel.object_keys"])
    assert not _violations_of("broker.server", ["metadata_quorum.image", "stream_storage.storage"])
