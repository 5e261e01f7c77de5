"""Every third-party package our code imports is declared in pyproject.toml: rlweb/ and trainer/ import only the
project's dependencies, tests/ also the `test` extra, benchmarks/ also the `bench` one. A package that came in only
through another (PyYAML through Optuna, SQLAlchemy through Optuna, kombu through Celery) would go the day that
other package stops needing it.

Imports are read with `ast` wherever they sit (a function's lazy `import psutil` counts), and each module is
mapped to the distribution that installs it with importlib.metadata."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# rlweb_client: the logging client in client/, a package of its own that needs only the standard library
OURS = {"rlweb", "trainer", "benchmarks", "tests", "rlweb_client", "__future__"}
# stable-baselines3: what the benchmarks compare with, and what rlweb_client's callback is tested on (the test extra)
EXTRAS_OF = {"rlweb": [], "trainer": [], "tests": ["test"], "benchmarks": ["test", "bench"]}


def declared(extras: list[str]) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [item for extra in extras
                                              for item in project["optional-dependencies"][extra]]
    return {normalized(re.match(r"[A-Za-z0-9_.\-]+", requirement).group()) for requirement in requirements}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_modules(folder: str) -> dict[str, str]:
    """Top-level module -> the first file importing it, for every absolute import under `folder`."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in OURS and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_package_the_code_imports_is_declared_in_pyproject():
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for folder, extras in EXTRAS_OF.items():
        allowed = declared(extras)
        for module, where in imported_top_modules(folder).items():
            names = {normalized(name) for name in distributions.get(module, [module])}
            if not names & allowed:
                undeclared.append(f"{module} ({', '.join(sorted(names))}), imported by {where}")
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(undeclared)
