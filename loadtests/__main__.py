"""``python -m llmload.loadtests``: gevent-patch first (locust's world), then the CLI.

A thin entry point: the command runs through the composition point ``llmload.run``.
"""

import sys

from gevent import monkey

monkey.patch_all()

from llmload.run import main  # noqa: E402  (after patching, as locust requires)

if __name__ == "__main__":
    sys.exit(main())
