"""Power a node through its BMC's Redfish service (the DMTF standard most server BMCs speak:
iDRAC, iLO, XClarity, OpenBMC, ...), with OpenStack's `sushy` client.

A node is configured by two labels:

- `redfish_url`: the BMC's base URL, e.g. `https://10.0.0.17` (the service root
  `/redfish/v1/` is found from it);
- `redfish_system`: which ComputerSystem of that BMC is the node: its id (`1`,
  `System.Embedded.1`, a UUID) or its full path (`/redfish/v1/Systems/1`). It may be left out
  when the BMC manages exactly one system, as most do.

Credentials, TLS verification and the timeout are settings (`POWER_REDFISH_*`): BMC passwords
stay in the environment, never in labels that every admin page shows.

Power-off asks the operating system to shut down (`GracefulShutdown`): the policy only powers
down nodes with nothing running, and a clean shutdown keeps local file systems and the node's
next boot healthy. A BMC that does not offer `GracefulShutdown` gets `ForceOff` only when
`POWER_REDFISH_FORCE_OFF` allows it; otherwise the driver refuses with a message. Whether the
OS really went down is read back through `read_state`, which the policy polls.

Redfish `PowerState` maps to the portal's hardware state as:

- `On` -> "on", `Off` -> "off";
- `PoweringOn`, `PoweringOff`, `Paused`, or no state at all -> "unknown": the node is neither
  usable nor safely off yet, so the policy keeps waiting (and its timeouts decide).
"""

import logging
from urllib.parse import quote

import sushy
from django.conf import settings
from sushy import exceptions as sushy_errors

from apps.power.drivers.base import HardwareState, PowerDriverError

log = logging.getLogger(__name__)

STATES: dict[sushy.PowerState, HardwareState] = {
    sushy.PowerState.ON: "on",
    sushy.PowerState.OFF: "off",
}

# A refused connection is retried once (a BMC's web server restarting); a BMC that is down
# should not hold a policy run for long.
CONNECTION_ATTEMPTS = 2
CONNECTION_RETRY_DELAY_SECONDS = 1


class RedfishDriver:
    """Power on, power off and read the power state of a node through its BMC's Redfish
    service. Every call opens its own connection (and Redfish session, closed again), so
    nothing is held between policy runs."""

    name = "redfish"

    def power_off(self, node) -> None:
        """Ask the BMC for a graceful shutdown of the node's system (or `ForceOff`, see the
        module's docstring). A system already off is left alone."""
        system = self._system(node)
        if system.power_state == sushy.PowerState.OFF:
            return
        allowed = self._allowed_resets(node, system)
        if sushy.ResetType.GRACEFUL_SHUTDOWN in allowed:
            reset = sushy.ResetType.GRACEFUL_SHUTDOWN
        elif sushy.ResetType.FORCE_OFF in allowed and settings.POWER_REDFISH_FORCE_OFF:
            reset = sushy.ResetType.FORCE_OFF
        else:
            raise PowerDriverError(
                f"Node {node.hostname}: the BMC at {self._url(node)} does not offer a graceful "
                f"shutdown for system {system.path} (it offers: {_names(allowed)}). "
                "Set POWER_REDFISH_FORCE_OFF=1 to let the portal cut power with ForceOff."
            )
        self._reset(node, system, reset)

    def power_on(self, node) -> None:
        """Ask the BMC to power the node's system on. A system already on is left alone."""
        system = self._system(node)
        if system.power_state == sushy.PowerState.ON:
            return
        allowed = self._allowed_resets(node, system)
        if sushy.ResetType.ON not in allowed:
            raise PowerDriverError(
                f"Node {node.hostname}: the BMC at {self._url(node)} does not offer power-on for "
                f"system {system.path} (it offers: {_names(allowed)})."
            )
        self._reset(node, system, sushy.ResetType.ON)

    def read_state(self, node) -> HardwareState:
        """The system's Redfish `PowerState` as "on", "off" or "unknown" (in transition)."""
        return STATES.get(self._system(node).power_state, "unknown")

    # --- talking to the BMC -----------------------------------------------------------------

    def _url(self, node) -> str:
        url = (node.labels or {}).get("redfish_url", "").strip()
        if not url:
            raise PowerDriverError(
                f"Node {node.hostname} has power_driver=redfish but no redfish_url label "
                "(the BMC's base URL, e.g. https://10.0.0.17)."
            )
        if not url.startswith(("http://", "https://")):
            raise PowerDriverError(
                f"Node {node.hostname}: redfish_url {url!r} must start with https:// or http://."
            )
        return url.rstrip("/")

    def _connect(self, node) -> sushy.Sushy:
        url = self._url(node)
        timeout = settings.POWER_REDFISH_TIMEOUT_SECONDS
        with self._errors(node, "connect to"):
            return sushy.Sushy(
                url,
                auth=_authentication(),
                verify=settings.POWER_REDFISH_VERIFY_TLS,
                read_timeout=timeout,
                connect_timeout=timeout,
                server_side_retries=CONNECTION_ATTEMPTS,
                server_side_retries_delay=CONNECTION_RETRY_DELAY_SECONDS,
            )

    def _system(self, node):
        """The node's ComputerSystem, freshly read."""
        bmc = self._connect(node)
        path = self._system_path(node, bmc)
        try:
            with self._errors(node, f"read system {path} of"):
                return bmc.get_system(path)
        except PowerDriverError as error:
            if not isinstance(error.__cause__, sushy_errors.ResourceNotFoundError):
                raise
            with self._errors(node, "read the systems of"):
                known = _ids(bmc.get_system_collection().members_identities)
            raise PowerDriverError(
                f"Node {node.hostname}: the BMC at {self._url(node)} has no system {path} "
                f"(it has: {known}); check the node's redfish_system label."
            ) from error

    def _system_path(self, node, bmc) -> str:
        """`redfish_system` as a path, or the BMC's only system."""
        wanted = (node.labels or {}).get("redfish_system", "").strip()
        if wanted.startswith("/"):
            return wanted
        with self._errors(node, "read the systems of"):
            collection = bmc.get_system_collection()
            if wanted:
                return f"{collection.path.rstrip('/')}/{quote(wanted, safe='')}"
            members = collection.members_identities
        if len(members) != 1:
            raise PowerDriverError(
                f"Node {node.hostname}: the BMC at {self._url(node)} manages {len(members)} "
                f"systems ({_ids(members)}); set the node's redfish_system label to one of them."
            )
        return members[0]

    def _allowed_resets(self, node, system) -> set[sushy.ResetType]:
        with self._errors(node, "read the power actions of"):
            return system.get_allowed_reset_system_values()

    def _reset(self, node, system, reset: sushy.ResetType) -> None:
        with self._errors(node, f"ask {reset.value} of"):
            system.reset_system(reset)
        log.info("Node %s: BMC accepted %s for %s", node.hostname, reset.value, system.path)

    def _errors(self, node, doing: str):
        return _TranslateErrors(node, self._url(node), doing)


class _TranslateErrors:
    """Turns sushy's exceptions into a `PowerDriverError` an admin can act on."""

    def __init__(self, node, url: str, doing: str) -> None:
        self.prefix = f"Node {node.hostname}: could not {doing} the BMC at {url}"

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or not isinstance(error, sushy_errors.SushyError):
            return False
        raise PowerDriverError(f"{self.prefix}: {_explain(error)}") from error


def _explain(error: sushy_errors.SushyError) -> str:
    if isinstance(error, sushy_errors.AccessError):
        return (
            f"it refused the credentials (HTTP {error.status_code}); check "
            "POWER_REDFISH_USERNAME and POWER_REDFISH_PASSWORD."
        )
    if isinstance(error, sushy_errors.ResourceNotFoundError):
        return f"not found (HTTP 404): {error}."
    if isinstance(error, sushy_errors.HTTPError):
        return f"it answered HTTP {error.status_code}: {error.detail or error.code}."
    if isinstance(error, sushy_errors.ConnectionError):
        text = str(error)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSLError" in text:
            return (
                "its TLS certificate is not trusted; install the BMC's CA on the portal's "
                "hosts, or set POWER_REDFISH_VERIFY_TLS=0 on a trusted management network."
            )
        return (
            "it is unreachable (is the URL right and the BMC's network up?). "
            f"{text.splitlines()[0] if text else ''}"
        ).strip()
    return str(error)


AUTHENTICATIONS = {
    "auto": sushy.auth.SessionOrBasicAuth,
    "basic": sushy.auth.BasicAuth,
    "session": sushy.auth.SessionAuth,
}


def _authentication() -> sushy.auth.AuthBase:
    try:
        kind = AUTHENTICATIONS[settings.POWER_REDFISH_AUTH]
    except KeyError:
        raise PowerDriverError(
            f"POWER_REDFISH_AUTH is {settings.POWER_REDFISH_AUTH!r}; "
            f"use one of {', '.join(AUTHENTICATIONS)}."
        ) from None
    if not settings.POWER_REDFISH_USERNAME:
        raise PowerDriverError(
            "POWER_REDFISH_USERNAME is not set: the portal needs a BMC account (with the "
            "operator or power-control role) to power nodes through Redfish."
        )
    return kind(username=settings.POWER_REDFISH_USERNAME, password=settings.POWER_REDFISH_PASSWORD)


def _names(resets) -> str:
    return ", ".join(sorted(reset.value for reset in resets)) or "nothing"


def _ids(paths) -> str:
    return ", ".join(sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in paths)) or "none"
