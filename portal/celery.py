"""Celery application for the portal's central worker and beat.

Node agents use their own, database-less app (`workers.agent.app`) on the same broker.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def ensure_filesystem_broker_dirs() -> None:
    """The embedded demo broker keeps its queue as files under var/; create them on start."""
    from django.conf import settings

    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if key in options:
            os.makedirs(options[key], exist_ok=True)


@app.on_configure.connect
def _prepare_broker(sender, **kwargs) -> None:
    ensure_filesystem_broker_dirs()
