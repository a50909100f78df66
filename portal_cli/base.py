"""What every `gpu-portal` command shares: the command group, its options, and the wrapper
that turns API and connection errors into a message on stderr and an exit code.

Exit codes: 0 done; 1 the portal refused (the API's code and message are printed), or a
followed job ended other than succeeded; 2 bad command-line input; 3 no token or the portal did
not answer.
"""

import functools
import sys
from collections.abc import Callable
from decimal import Decimal

import click

from portal_cli import output
from portal_cli.client import ApiError, Client, ConnectionProblem
from portal_cli.config import ConfigError, load_settings

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3


def money(amount: str | None, currency: str | None) -> str:
    """An API amount (an exact decimal string) with thousands separators and its currency."""
    if amount in (None, ""):
        return ""
    whole, _, cents = str(amount).partition(".")
    sign = "-" if whole.startswith("-") else ""
    grouped = f"{int(whole.lstrip('-') or 0):,}"
    return f"{sign}{grouped}{'.' + cents if cents else ''} {currency or ''}".rstrip()


def hours(value: str) -> str:
    return f"{Decimal(value):,.2f}"


class Context:
    def __init__(self, url: str | None, token: str | None, as_json: bool) -> None:
        self.url = url
        self.token = token
        self.as_json = as_json
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            settings = load_settings(url=self.url, token=self.token)
            self._client = Client(settings.url, settings.token)
        return self._client

    def show(self, data, human: Callable[[], None]) -> None:
        """Print `data` as JSON under --json, else the human form `human` prints."""
        if self.as_json:
            output.print_json(data)
        else:
            human()


def command(group: click.Group, name: str | None = None, **kwargs):
    """A subcommand with `--json`, whose API and connection errors become a clear message on
    stderr and a non-zero exit code."""

    def decorate(func):
        @group.command(name, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
        @click.pass_obj
        @functools.wraps(func)
        def wrapper(ctx: Context, as_json: bool, **params):
            ctx.as_json = ctx.as_json or as_json
            try:
                return func(ctx, **params)
            except ApiError as error:
                message = f"{error.message} ({error.status} {error.code})"
                lines = output.describe_detail(error.detail)
                output.print_error(
                    "\n  ".join([message, *lines]), as_json=ctx.as_json, data=error.as_dict()
                )
                sys.exit(EXIT_REFUSED)
            except (ConfigError, ConnectionProblem) as error:
                output.print_error(str(error), as_json=ctx.as_json)
                sys.exit(EXIT_UNREACHABLE)

        return wrapper

    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="GPU_PORTAL_URL", help="The portal, e.g. https://gpus.example.org.")
@click.option("--token", envvar="GPU_PORTAL_TOKEN", help="API token (better: GPU_PORTAL_TOKEN).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
@click.version_option(package_name="gpu-portal")
@click.pass_context
def cli(click_ctx: click.Context, url: str | None, token: str | None, as_json: bool) -> None:
    """Book GPUs, run jobs and see their cost on the GPU portal from a terminal.

    The portal and token come from --url/--token, GPU_PORTAL_URL/GPU_PORTAL_TOKEN, or
    ~/.config/gpu-portal/config.toml (url = "...", token = "...").
    """
    click_ctx.obj = Context(url, token, as_json)
