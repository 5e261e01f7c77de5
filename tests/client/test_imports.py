"""The client stays light: the standard library only, and never torch or Django."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib

from tests.client.conftest import CLIENT


def test_importing_the_client_imports_neither_torch_nor_django():
    code = ("import json, sys, rlweb_client; "
            "print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in {'torch', 'django', "
            "'numpy', 'requests'})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(CLIENT)})
    assert json.loads(done.stdout) == []


def test_the_client_imports_only_the_standard_library_and_declares_no_dependencies():
    outside = set()
    for path in (CLIENT / "rlweb_client").rglob("*.py"):
        # stable-baselines3's callback and the TensorBoard watcher import what the scripts that use them have; the
        # system sampler uses psutil when there (system.py: /proc without it)
        theirs = {"sb3.py": {"stable_baselines3"}, "tensorboard_watch.py": {"tensorboard"},
                  "system.py": {"psutil"}}.get(path.name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            outside |= {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) - {"rlweb_client"} - theirs
    assert outside == set()
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == [] and project["requires-python"] == ">=3.9"
    from rlweb_client.run import VERSION

    assert project["version"] == VERSION  # what runs record, and what pip knows a new client by
