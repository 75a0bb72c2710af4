"""`python -m mechmem ...`: the `mechmem` command."""

from mechmem.cli.main import entry_point

if __name__ == "__main__":
    entry_point()
