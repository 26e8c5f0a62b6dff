"""``python -m loadtests``: gevent-patch first (locust's world), then the CLI."""

import sys

from gevent import monkey

monkey.patch_all()

from loadtests.cli import main  # noqa: E402  (after patching, as locust requires)

if __name__ == "__main__":
    sys.exit(main())
