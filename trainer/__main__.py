import sys

from trainer.cli import main

if __name__ == "__main__":  # not when a spawned worker (async envs, ES) imports this module again
    sys.exit(main())
