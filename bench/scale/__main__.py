"""``python -m bench.scale``: the same as ``python -m bench scale``."""

import sys

from bench.scale import main

if __name__ == "__main__":
    sys.exit(main())
