"""The price of GPU time: the rate in force and the one price formula.

Everything that puts a money figure on GPU time goes through here: metering (what is charged),
the price shown before booking (page and API), budget admission, the cost still booked, job
estimates and the what-if page. So an estimate and the charge that follows it use the same
rate cards, the same cuts where a card starts or ends, and the same over-quota multiplier.

The formula, per GPU over a stretch of time under one rate card:
    GPU cost    = seconds x price per GPU-hour / 3600, x the over-quota multiplier when the GPU
                  is above the team's guarantee;
    energy cost = kWh x the card's energy price (none without one).
Costs keep 10 decimal places (the ledger's precision); shown figures are rounded to cents once,
part by part, and a total is the sum of its rounded parts.
"""

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone

from apps.billing.models import RateCard

ZERO = Decimal(0)
CENT = Decimal("0.01")
COST_PLACES = Decimal("1e-10")
SECONDS_PER_HOUR = Decimal(3600)
JOULES_PER_KWH = 3_600_000.0
# How far back the energy estimate looks for what a GPU of the model draws per hour.
ENERGY_ESTIMATE_DAYS = 7


def gpu_cost(seconds, card: RateCard, *, over_quota: bool = False) -> Decimal:
    """The GPU cost of one GPU held `seconds` under `card` (exact to 10 places): the formula
    every charge and every estimate uses."""
    multiplier = card.over_quota_multiplier if over_quota else 1
    return (Decimal(seconds) * card.price_per_gpu_hour * multiplier / SECONDS_PER_HOUR).quantize(
        COST_PLACES
    )


def energy_cost(kwh: Decimal, card: RateCard) -> Decimal:
    """The energy cost of `kwh` under `card` (zero when the card prices no energy)."""
    price = card.energy_price_per_kwh
    return (kwh * price).quantize(COST_PLACES) if price and kwh else ZERO


def gpu_hours_cost(card: RateCard, *, hours, over_hours=0) -> Decimal:
    """The GPU cost of `hours` GPU-hours under `card`, `over_hours` of them (part of `hours`)
    above the guarantee; the same formula as `gpu_cost`, counted in hours."""
    seconds = Decimal(str(hours)) * SECONDS_PER_HOUR
    over = Decimal(str(over_hours)) * SECONDS_PER_HOUR
    return gpu_cost(seconds - over, card) + gpu_cost(over, card, over_quota=True)


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


class RateBook:
    """The rate cards (all, or those in force over [start, end)), read in one query, to price
    many uses at their own instants without a query each. Models are named by id or name;
    instants are datetimes or epoch seconds."""

    def __init__(self, *, start: datetime | None = None, end: datetime | None = None) -> None:
        cards = RateCard.objects.select_related("gpu_model").order_by("effective_from")
        if start is not None and end is not None:
            cards = cards.filter(
                Q(effective_to__isnull=True) | Q(effective_to__gt=start), effective_from__lt=end
            )
        self._cards: dict[int, list[RateCard]] = defaultdict(list)
        self._ids: dict[str, int] = {}
        for card in cards:
            self._cards[card.gpu_model_id].append(card)
            self._ids[card.gpu_model.name] = card.gpu_model_id
        self._starts = {m: [_epoch(c.effective_from) for c in cs] for m, cs in self._cards.items()}
        self._ends = {
            m: [_epoch(c.effective_to) if c.effective_to else None for c in cs]
            for m, cs in self._cards.items()
        }
        self._cuts = {
            m: sorted(set(self._starts[m]) | {e for e in self._ends[m] if e is not None})
            for m in self._cards
        }

    def _model_id(self, model) -> int | None:
        return self._ids.get(model) if isinstance(model, str) else model

    def cuts(self, model) -> list[int]:
        """The instants (epoch seconds) where the model's price changes."""
        return self._cuts.get(self._model_id(model), [])

    def card_at(self, model, at) -> RateCard | None:
        model_id = self._model_id(model)
        if isinstance(at, datetime):
            at = _epoch(at)
        index = bisect_right(self._starts.get(model_id, []), at) - 1
        if index < 0:
            return None
        card_end = self._ends[model_id][index]
        return self._cards[model_id][index] if card_end is None or at < card_end else None

    def pieces(self, model, start: datetime, end: datetime):
        """[start, end) cut where the model's price changes: (start, end, card or None)."""
        cursor = start
        for cut in self.cuts(model):
            moment = datetime.fromtimestamp(cut, UTC)
            if cursor < moment < end:
                yield cursor, moment, self.card_at(model, cursor)
                cursor = moment
        if cursor < end:
            yield cursor, end, self.card_at(model, cursor)

    def cost(self, model, *, hours, over_hours=0, at) -> Decimal | None:
        """As `gpu_hours_cost` at the card in force at `at`; None when the model is unpriced."""
        card = self.card_at(model, at)
        if card is None:
            return None
        return gpu_hours_cost(card, hours=hours, over_hours=over_hours)


@dataclass
class Price:
    """The price of holding `count` GPUs over a window, `over_quota_gpus` of them above the
    team's guarantee. Exact figures; `rounded()` gives the parts in cents."""

    count: int
    over_quota_gpus: int
    gpu_hours: Decimal = ZERO
    unpriced_gpu_hours: Decimal = ZERO
    list_cost: Decimal = ZERO
    over_quota_premium: Decimal = ZERO
    energy_kwh: Decimal = ZERO
    energy_cost: Decimal = ZERO
    pieces: list = field(default_factory=list)

    @property
    def exact_total(self) -> Decimal:
        """List + premium + energy, unrounded (to add many prices up before rounding once)."""
        return self.list_cost + self.over_quota_premium + self.energy_cost

    @property
    def total(self) -> Decimal:
        """List + premium + energy, each rounded to the cent (so shown parts add up)."""
        parts = (self.list_cost, self.over_quota_premium, self.energy_cost)
        return sum((p.quantize(CENT) for p in parts), ZERO)

    def as_dict(self) -> dict:
        return {
            "count": self.count,
            "over_quota_gpus": self.over_quota_gpus,
            "gpu_hours": str(self.gpu_hours.quantize(CENT)),
            "unpriced_gpu_hours": str(self.unpriced_gpu_hours.quantize(CENT)),
            "list_cost": str(self.list_cost.quantize(CENT)),
            "over_quota_premium": str(self.over_quota_premium.quantize(CENT)),
            "energy_kwh": str(self.energy_kwh.quantize(Decimal("0.001"))),
            "energy_cost": str(self.energy_cost.quantize(CENT)),
            "total": str(self.total),
            "currency": settings.BILLING_CURRENCY,
            "rates": [
                {
                    "start": s.isoformat(),
                    "end": e.isoformat(),
                    "price_per_gpu_hour": str(card.price_per_gpu_hour) if card else None,
                    "over_quota_multiplier": str(card.over_quota_multiplier) if card else None,
                }
                for s, e, card in self.pieces
            ],
        }


def energy_per_gpu_hour(gpu_model_id: int, *, now: datetime | None = None) -> Decimal:
    """What one GPU of the model drew per hour (kWh) over the last ENERGY_ESTIMATE_DAYS, from
    the hour rollups; zero when nothing was measured."""
    from apps.telemetry.models import GpuHourRollup

    now = now or timezone.now()
    measured = GpuHourRollup.objects.filter(
        gpu__model_id=gpu_model_id,
        bucket__gte=now - timedelta(days=ENERGY_ESTIMATE_DAYS),
        bucket__lt=now,
        energy_j__isnull=False,
    ).aggregate(joules=Sum("energy_j"), hours=Count("id"))
    if not measured["hours"]:
        return ZERO
    kwh = measured["joules"] / measured["hours"] / JOULES_PER_KWH
    return Decimal(kwh).quantize(Decimal("1e-6"))


def price_holding(
    *,
    gpu_model,
    count: int,
    start: datetime,
    end: datetime,
    over_quota_gpus: int = 0,
    rates: RateBook | None = None,
    kwh_per_gpu_hour: Decimal | None = None,
) -> Price:
    """The price of holding `count` GPUs of `gpu_model` over [start, end), `over_quota_gpus` of
    them above the team's guarantee (at the card's over-quota multiplier): cut where a rate card
    starts or ends, with an energy estimate from what the model's GPUs drew lately. Time no card
    prices is free and counted in `unpriced_gpu_hours`."""
    rates = rates or RateBook(start=start, end=end)
    if kwh_per_gpu_hour is None:
        kwh_per_gpu_hour = energy_per_gpu_hour(gpu_model.pk)
    over = max(0, min(over_quota_gpus, count))
    price = Price(count=count, over_quota_gpus=over)
    for piece_start, piece_end, card in rates.pieces(gpu_model.pk, start, end):
        seconds = int((piece_end - piece_start).total_seconds())
        hours = Decimal(seconds * count) / SECONDS_PER_HOUR
        price.gpu_hours += hours
        price.pieces.append((piece_start, piece_end, card))
        if card is None:
            price.unpriced_gpu_hours += hours
            continue
        at_list = gpu_cost(seconds, card)
        price.list_cost += count * at_list
        price.over_quota_premium += over * (gpu_cost(seconds, card, over_quota=True) - at_list)
        kwh = hours * kwh_per_gpu_hour
        price.energy_kwh += kwh
        price.energy_cost += energy_cost(kwh, card)
    return price


def quote_booking(*, team, gpu_model, count: int, start: datetime, end: datetime) -> Price:
    """The price of a booking before it is made: the quota rule says how many of the GPUs would
    be above the team's guarantee given what it holds then, and those are priced at the
    over-quota multiplier, as metering will charge them."""
    from apps.reservations.selectors import quota_verdict

    verdict = quota_verdict(team=team, gpu_model=gpu_model, count=count, start=start, end=end)
    return price_holding(
        gpu_model=gpu_model, count=count, start=start, end=end, over_quota_gpus=verdict.over_gpus
    )
