"""``python -m llmload.reports``: a thin entry point.

``ci-gate`` runs a load test, so it lives above ``reports`` (``llmload.ci``);
every other command is ``reports.cli``.
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["ci-gate"]:
        from llmload.ci import main as ci_main

        sys.exit(ci_main(sys.argv[2:]))
    from llmload.reports.cli import main

    sys.exit(main())
