"""The `gpu-portal` command: the group (portal_cli.base) with every command module loaded."""

from portal_cli import billing, bookings, jobs  # noqa: F401  (each registers its commands)
from portal_cli.base import cli


def main() -> None:
    cli(prog_name="gpu-portal")


if __name__ == "__main__":
    main()
