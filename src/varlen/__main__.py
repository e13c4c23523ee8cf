"""`python -m varlen`: the same as the `varlen` command."""

import sys

from varlen.cli.console import main

if __name__ == "__main__":
    sys.argv[0] = "varlen"  # usage lines (argparse's, jsonargparse's --data.help) name the command, not __main__.py
    main()
