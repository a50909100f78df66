"""Audit events for what django-axes does at login (lockouts)."""

from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.dispatch import receiver
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record

LOGIN_LOCKED_OUT = "login.locked_out"


@receiver(user_locked_out, dispatch_uid="audit_login_locked_out")
def audit_login_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """One event per lockout. Axes signals again on every refused attempt while it lasts, so a
    lockout already recorded within the cool-off (same address, and same username unless the
    whole address is locked) is not recorded again."""
    failures = getattr(request, "axes_failures_since_start", None) or 0
    if failures < settings.AXES_FAILURE_LIMIT:
        return
    whole_address = getattr(request, "portal_address_locked", False)
    recent = AuditEvent.objects.filter(
        action=LOGIN_LOCKED_OUT,
        created_at__gte=timezone.now() - settings.AXES_COOLOFF_TIME,
        after__ip_address=ip_address,
    )
    if whole_address:
        recent = recent.filter(after__scope="address")
    else:
        recent = recent.filter(after__username=username, after__scope="user")
    if recent.exists():
        return
    target = get_user_model().objects.filter(username=username).first()
    if target is None:  # an unknown name: the attempts row is the only object there is
        target = AccessAttempt.objects.filter(username=username, ip_address=ip_address).first()
    if target is None:
        return
    audit_record(
        actor=None,
        action=LOGIN_LOCKED_OUT,
        target=target,
        after={
            "scope": "address" if whole_address else "user",
            "username": username,
            "ip_address": ip_address,
            "failures": failures,
            "locked_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
        },
        reason="Too many failed log-ins from this address"
        if whole_address
        else "Too many failed log-ins for this user from this address",
    )
