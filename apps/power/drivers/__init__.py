"""Which driver powers a node: `node.labels["power_driver"]` names one of `POWER_DRIVERS`
(dotted paths in settings, so a higher app such as the Slurm integration can offer its own
without this app importing it); nodes without the label use `POWER_DEFAULT_DRIVER`."""

from django.conf import settings
from django.utils.module_loading import import_string

from apps.power.drivers.base import PowerDriver, PowerDriverError


def driver_for(node) -> PowerDriver:
    name = (node.labels or {}).get("power_driver") or settings.POWER_DEFAULT_DRIVER
    try:
        path = settings.POWER_DRIVERS[name]
    except KeyError:
        raise PowerDriverError(
            f"Node {node.hostname}: unknown power driver {name!r} "
            f"(known: {', '.join(sorted(settings.POWER_DRIVERS))})"
        ) from None
    return import_string(path)()
