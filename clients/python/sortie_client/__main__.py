"""python3 -m sortie_client: runs a worker (see sortie_client.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
