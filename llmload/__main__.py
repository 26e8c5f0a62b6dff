"""``python -m llmload``: the same as the ``llmload`` console command."""

import sys

from llmload.cli import main

if __name__ == "__main__":
    sys.exit(main())
