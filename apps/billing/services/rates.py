"""Rate cards: a GPU model's price from a moment on. Time already charged keeps its price."""

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q

from apps.audit.services import audit_record
from apps.billing.models import LedgerEntry, RateCard
from apps.billing.services.access import require_billing_admin
from portal.formatting import format_when

RATE_FIELDS = (
    "price_per_gpu_hour",
    "currency",
    "effective_from",
    "effective_to",
    "over_quota_multiplier",
    "energy_price_per_kwh",
)


def _rate_snapshot(card: RateCard) -> dict:
    values = {f: getattr(card, f) for f in RATE_FIELDS}
    return {"gpu_model": card.gpu_model.name} | {
        name: None if value is None else str(value) for name, value in values.items()
    }


def _metered_horizon(gpu_model) -> datetime | None:
    """The end of the latest slice already charged for the model: prices before it are final."""
    return LedgerEntry.objects.filter(gpu_model=gpu_model).aggregate(end=Max("slice_end"))["end"]


def _check_rate_card(card: RateCard, *, previous: RateCard | None = None) -> None:
    card.full_clean()
    overlapping = RateCard.objects.filter(gpu_model=card.gpu_model).exclude(pk=card.pk)
    overlapping = overlapping.filter(
        Q(effective_to__isnull=True) | Q(effective_to__gt=card.effective_from)
    )
    if card.effective_to is not None:
        overlapping = overlapping.filter(effective_from__lt=card.effective_to)
    clash = overlapping.first()
    if clash:
        until = f"{format_when(clash.effective_to)}" if clash.effective_to else "open-ended"
        raise ValidationError(
            {
                "effective_from": (
                    f"Overlaps the {card.gpu_model} rate card in force from "
                    f"{format_when(clash.effective_from)} ({until}); end that one first."
                )
            }
        )
    horizon = _metered_horizon(card.gpu_model)
    changed_from = _changed_from(previous, card)
    if horizon is not None and changed_from is not None and changed_from < horizon:
        raise ValidationError(
            {
                "effective_from": (
                    f"Usage up to {format_when(horizon)} is already charged at the price "
                    "then in force; a change may only take effect after that."
                )
            }
        )


def _changed_from(previous: RateCard | None, card: RateCard) -> datetime | None:
    """The first instant whose price the edit changes (None: nothing changes)."""
    if previous is None:
        return card.effective_from
    if _price_terms(previous) != _price_terms(card):
        return min(previous.effective_from, card.effective_from)
    moments = []
    if previous.effective_from != card.effective_from:
        moments.append(min(previous.effective_from, card.effective_from))
    if previous.effective_to != card.effective_to:
        ends = [e for e in (previous.effective_to, card.effective_to) if e is not None]
        moments.append(min(ends))
    return min(moments) if moments else None


def _price_terms(card: RateCard) -> tuple:
    return (
        card.price_per_gpu_hour,
        card.currency,
        card.over_quota_multiplier,
        card.energy_price_per_kwh,
    )


@transaction.atomic
def rate_card_create(*, actor, gpu_model, **fields) -> RateCard:
    """Add a price for a GPU model from `effective_from`. Refuses overlaps with the model's other
    cards and any start before time already charged. Audited."""
    require_billing_admin(actor)
    _serialize_rate_changes()
    card = RateCard(gpu_model=gpu_model, **fields)
    card.currency = (card.currency or settings.BILLING_CURRENCY).upper()
    _check_rate_card(card)
    card.save()
    audit_record(actor=actor, action="rate_card.create", target=card, after=_rate_snapshot(card))
    return card


@transaction.atomic
def rate_card_update(*, actor, card: RateCard, **fields) -> RateCard:
    """Change a rate card (e.g. end it so a new price can start). Time already charged keeps its
    price: the change must take effect after the metered horizon. Audited."""
    require_billing_admin(actor)
    _serialize_rate_changes()
    card = RateCard.objects.select_for_update().select_related("gpu_model").get(pk=card.pk)
    before = _rate_snapshot(card)
    previous = RateCard(**{f: getattr(card, f) for f in RATE_FIELDS}, gpu_model=card.gpu_model)
    for name, value in fields.items():
        setattr(card, name, value)
    card.currency = card.currency.upper()
    _check_rate_card(card, previous=previous)
    card.save()
    audit_record(
        actor=actor,
        action="rate_card.change",
        target=card,
        before=before,
        after=_rate_snapshot(card),
    )
    return card


def _serialize_rate_changes() -> None:
    """Two racing edits must not both pass the overlap check (SQLite has no exclusion
    constraint; PostgreSQL has one, this just gives a clean error instead of an IntegrityError)."""
    list(RateCard.objects.select_for_update().values_list("pk", flat=True))
