"""A template rlweb plugin: copy this folder, rename the package, and install it where rlweb runs (docs/plugins.md)."""
