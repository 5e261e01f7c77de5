"""A throwaway package of broken plugins, installed into a folder put on sys.path: its dist-info declares three
`rlweb.algorithms` entry points, one that raises on import, one whose config cannot be built, and one that crashes
in train (tests/trainer/test_plugins.py, tests/web/test_plugins.py)."""

from __future__ import annotations

import importlib.metadata
import textwrap
from pathlib import Path

import pytest

from trainer import registry

EXAMPLE = "rlweb-example-plugin"
EXAMPLE_ENV = "rlweb-example/Corridor-v0"
BROKEN_PACKAGE = "rlweb-broken-plugins"
BROKEN_VERSION = "1.0.0"

MODULES = {
    "rlweb_broken_import.py": """
        raise ImportError("rlweb_broken_import needs the library 'nowhere', which is not installed")
    """,
    "rlweb_broken.py": """
        from dataclasses import dataclass

        import numpy as np

        from trainer.agent import Agent
        from trainer.params import param
        from trainer.registry import CLASSIC, AlgorithmSpec


        @dataclass
        class BadConfig:
            layers: int = param(0, "hidden layers", low=1, high=8)  # its own default is out of bounds


        @dataclass
        class CrashingConfig:
            num_envs: int = param(1, "environments", low=1, high=1)


        class Crashing(Agent):
            name = "crashing"

            def build(self):
                pass

            def act(self, observations, deterministic):
                return np.zeros(len(observations), dtype=np.int64)

            def train(self, runner):
                raise RuntimeError("the crashing plugin's train loop failed on purpose")


        def spec(name, config_class, agent_class):
            return AlgorithmSpec(name=name, family=CLASSIC, description="a broken test plugin",
                                 config_class=config_class, agent_class=agent_class, observation_spaces=("Box",),
                                 action_spaces=("Discrete",))


        BAD_CONFIG = spec("bad-config", BadConfig, Crashing)
        CRASHING = spec("crashing", CrashingConfig, Crashing)
    """,
}

ENTRY_POINTS = """
    [rlweb.algorithms]
    import-error = rlweb_broken_import:SPEC
    bad-config = rlweb_broken:BAD_CONFIG
    crashing = rlweb_broken:CRASHING
"""


def install_broken_plugins(folder: Path) -> Path:
    """Write the package and its metadata into `folder` (to be put on sys.path); returns it."""
    for name, source in MODULES.items():
        (folder / name).write_text(textwrap.dedent(source))
    info = folder / f"{BROKEN_PACKAGE.replace('-', '_')}-{BROKEN_VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {BROKEN_PACKAGE}\nVersion: {BROKEN_VERSION}\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    return folder


needs_example_plugin = pytest.mark.skipif(
    not any(ep.name == "soft-dqn" for ep in importlib.metadata.entry_points(group=registry.ENTRY_POINT_GROUP)),
    reason="the example plugin is not installed (pip install -e examples/plugin)")


@pytest.fixture
def broken_plugins(tmp_path, monkeypatch):
    """The throwaway broken package on sys.path, the registry read again with it; read again without it after."""
    monkeypatch.syspath_prepend(str(install_broken_plugins(tmp_path)))
    registry.rediscover()
    yield tmp_path
    monkeypatch.undo()
    registry.rediscover()
