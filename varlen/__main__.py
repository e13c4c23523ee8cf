"""``python -m varlen``: the same as the ``varlen`` command."""

from varlen.cli import main

if __name__ == "__main__":
    main()
