"""Celery application for the portal's central worker and beat.

Node agents use their own, database-less app (`workers.agent.app`) on the same broker. Without
Redis that broker is the embedded `atomicfs://` transport of `workers.broker` (the settings
import it, which registers the scheme; it creates its folders under var/broker itself).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
