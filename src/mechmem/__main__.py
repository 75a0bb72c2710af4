"""`python -m mechmem ...` and the console script `mechmem`: the `mechmem` command (`mechmem.cli.main`), with
stop signals caught before the command's own imports (`mechmem.io.catch_stop_signals`)."""

from mechmem.io import catch_stop_signals


def entry_point() -> None:
    """The console script `mechmem` (`[project.scripts]`): stop signals caught first, then the command."""
    catch_stop_signals()
    from mechmem.cli.main import entry_point as command

    command()


if __name__ == "__main__":
    entry_point()
