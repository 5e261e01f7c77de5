import importlib
import pkgutil
import sys

import benchmarks


def main(argv: list[str]) -> int:
    available = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if not m.name.startswith("_"))
    names = [a for a in argv if not a.startswith("-")] or available
    unknown = sorted(set(names) - set(available))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available)}", file=sys.stderr)
        return 2
    options = [a for a in argv if a.startswith("-")]
    for name in names:
        print(f"=== benchmarks.{name}", flush=True)
        importlib.import_module(f"benchmarks.{name}").main(options)
    return 0


sys.exit(main(sys.argv[1:]))
