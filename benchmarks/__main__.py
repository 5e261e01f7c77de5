import importlib
import pkgutil
import sys

import benchmarks


def main(argv: list[str]) -> int:
    available = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if not m.name.startswith("_"))
    first_option = next((index for index, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    names, options = argv[:first_option] or available, argv[first_option:]  # options may take values
    unknown = sorted(set(names) - set(available))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"=== benchmarks.{name}", flush=True)
        importlib.import_module(f"benchmarks.{name}").main(options)
    return 0


if __name__ == "__main__":  # not when a spawned worker (async envs) imports this module again
    sys.exit(main(sys.argv[1:]))
