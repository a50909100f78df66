"""Where the client finds the portal and its token: command-line options, then the
GPU_PORTAL_URL / GPU_PORTAL_TOKEN environment variables, then the config file
(~/.config/gpu-portal/config.toml, or $XDG_CONFIG_HOME/gpu-portal/config.toml)."""

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


class ConfigError(Exception):
    """The client cannot tell which portal to ask, or with which token."""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpu-portal" / "config.toml"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def _read_file(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except (tomllib.TOMLDecodeError, OSError) as error:
        raise ConfigError(f"Cannot read {path}: {error}") from error
    unknown = set(data) - {"url", "token"}
    if unknown:
        raise ConfigError(f"{path}: unknown keys {', '.join(sorted(unknown))} (use url, token).")
    for key in ("url", "token"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f'{path}: {key} must be a string, e.g. {key} = "...".')
    return data


def load_settings(*, url: str | None = None, token: str | None = None) -> Settings:
    """The portal's URL and the API token, by precedence option > environment > file."""
    path = config_path()
    file = _read_file(path)
    url = url or os.environ.get("GPU_PORTAL_URL") or file.get("url") or DEFAULT_URL
    token = token or os.environ.get("GPU_PORTAL_TOKEN") or file.get("token")
    if not token:
        raise ConfigError(
            "No API token. Create one on the portal's API tokens page (click your user name), "
            f'then set GPU_PORTAL_TOKEN or put token = "..." in {path}.'
        )
    return Settings(url=url.rstrip("/"), token=token)
