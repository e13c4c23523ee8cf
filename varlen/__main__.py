"""``python -m varlen``: the same as the ``varlen`` command."""

from varlen.cli import console

if __name__ == "__main__":
    console()
