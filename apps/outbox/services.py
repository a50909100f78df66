"""The transactional outbox: messages written with the change that needs them, sent after.

A service that must tell a node agent something (launch, kill) or tell people something (a
booking moved) calls `outbox_send_task` / `outbox_send_mail` inside its transaction. The row
commits or rolls back with the change, so a message is never sent for a change that did not
happen and never lost for one that did. Right after the commit the portal tries to send at once;
if the broker (or mail server) is down, beat's `outbox.flush` retries every OUTBOX_FLUSH_SECONDS
with backoff until it answers. Messages of one kind go out in the order they were written, and a
failure stops that kind's round, so a kill never overtakes the launch before it.
"""

import logging
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from apps.outbox.models import OutboxKind, OutboxMessage

logger = logging.getLogger(__name__)

FLUSH_BATCH = 500
MAX_BACKOFF_SECONDS = 60


def outbox_send_task(
    name: str, *, queue: str, args=(), kwargs: dict | None = None, key: str = ""
) -> OutboxMessage:
    """Send Celery task `name` to `queue` once the current transaction commits (JSON args).
    A `key` lets the sender withdraw it while it is unsent (`outbox_withdraw`)."""
    message = OutboxMessage.objects.create(
        kind=OutboxKind.TASK,
        name=name,
        queue=queue,
        payload={"args": list(args), "kwargs": kwargs or {}},
        key=key,
    )
    _flush_after_commit()
    return message


def outbox_withdraw(*, key: str) -> list[str]:
    """Drop the unsent messages with `key`, in the caller's transaction: they are never sent.
    Returns the queues they were for (the ones that will not get them). A message being sent
    right now is locked by the flush: this waits for it, and then it counts as sent."""
    if not key:
        raise ValueError("outbox_withdraw needs a key")
    withdrawn = list(
        OutboxMessage.objects.select_for_update()
        .filter(key=key, sent_at__isnull=True)
        .order_by("id")
    )
    if withdrawn:
        OutboxMessage.objects.filter(pk__in=[m.pk for m in withdrawn]).delete()
        logger.info("outbox: withdrew %d unsent %s messages", len(withdrawn), key)
    return [m.queue for m in withdrawn]


def outbox_send_mail(*, subject: str, body: str, recipients: list[str]) -> OutboxMessage | None:
    """Email `recipients` once the current transaction commits; nothing if there are none."""
    recipients = sorted({r for r in recipients if r})
    if not recipients:
        return None
    message = OutboxMessage.objects.create(
        kind=OutboxKind.EMAIL,
        name=subject[:200],
        payload={"subject": subject, "body": body, "recipients": recipients},
    )
    _flush_after_commit()
    return message


def _flush_now() -> None:
    try:
        outbox_flush(due_only=False)
    except Exception:  # noqa: BLE001 - beat's flush sends it; the request must not fail
        logger.warning("outbox: immediate send failed; beat retries", exc_info=True)


def _flush_after_commit() -> None:
    # Registered once per message; after the first flush the others find nothing to send
    # (one cheap query per kind), which keeps this right whatever savepoints roll back.
    transaction.on_commit(_flush_now)


def outbox_flush(*, now: datetime | None = None, due_only: bool = True) -> dict[str, int]:
    """Send unsent messages in the order written, per kind; stop a kind at its first failure
    (the broker or mail server is down: the rest would fail too, and order matters) and back
    it off. `due_only=False` (right after a commit) ignores the backoff of older messages so
    that they still go out before the new one. Returns counts sent and failed."""
    now = now or timezone.now()
    done = {"sent": 0, "failed": 0}
    for kind in OutboxKind.values:
        with transaction.atomic():
            # Not skip_locked: a second flush waits for the first rather than overtake it.
            pending = OutboxMessage.objects.select_for_update().filter(
                kind=kind, sent_at__isnull=True
            )
            oldest = pending.order_by("id").first()
            if oldest is None or (due_only and oldest.next_attempt_at > now):
                continue  # nothing to send, or the oldest is backing off: keep the order
            for message in pending.order_by("id")[:FLUSH_BATCH]:
                try:
                    _deliver(message)
                except Exception as exc:  # noqa: BLE001 - any failure: retry later, in order
                    _failed(message, exc, now)
                    done["failed"] += 1
                    break
                message.sent_at = timezone.now()
                message.attempts += 1
                message.save(update_fields=["sent_at", "attempts"])
                done["sent"] += 1
    return done


def _deliver(message: OutboxMessage) -> None:
    if message.kind == OutboxKind.TASK:
        current_app.send_task(
            message.name,
            args=message.payload.get("args", []),
            kwargs=message.payload.get("kwargs", {}),
            queue=message.queue or None,
            retry=False,
        )
    else:
        send_mail(
            message.payload["subject"],
            message.payload["body"],
            None,
            message.payload["recipients"],
            fail_silently=False,
        )


def _failed(message: OutboxMessage, exc: Exception, now: datetime) -> None:
    message.attempts += 1
    message.last_error = f"{type(exc).__name__}: {exc}"[:2000]
    backoff = min(
        settings.OUTBOX_FLUSH_SECONDS * 2 ** min(message.attempts, 10), MAX_BACKOFF_SECONDS
    )
    message.next_attempt_at = now + timedelta(seconds=backoff)
    message.save(update_fields=["attempts", "last_error", "next_attempt_at"])
    logger.warning(
        "outbox: %s %s not sent (attempt %d): %s",
        message.kind,
        message.name,
        message.attempts,
        message.last_error,
    )


def outbox_prune(*, now: datetime | None = None) -> int:
    """Forget messages sent more than OUTBOX_KEEP_SENT_DAYS ago."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.OUTBOX_KEEP_SENT_DAYS)
    return OutboxMessage.objects.filter(sent_at__lt=cutoff).delete()[0]
