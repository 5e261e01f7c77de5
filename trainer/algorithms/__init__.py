"""One module per algorithm family. Each defines its AlgorithmSpec, and pyproject.toml declares it as an entry point
of the group `rlweb.algorithms`, through which trainer.registry finds it as it finds plugins' (docs/plugins.md)."""
