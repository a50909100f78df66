"""The budgets API: team and unit budgets per month with their alerts and burn-down."""

from django.utils import timezone
from rest_framework import mixins, serializers, viewsets

from apps.billing import selectors, services
from apps.billing.api import BillingAdminWrites, decimals_as_strings
from apps.billing.choices import Enforcement
from apps.billing.models import Budget, BudgetAlert
from apps.billing.periods import parse_period
from apps.billing.units import unit_budget_state
from apps.teams.models import OrgUnit, Team
from portal.serializers import RefuseUnknownFieldsMixin


class BudgetAlertSerializer(serializers.ModelSerializer):
    class Meta:
        model = BudgetAlert
        fields = ["kind", "threshold", "spent", "exceeds_on", "message", "created_at"]


class BudgetSerializer(RefuseUnknownFieldsMixin, serializers.ModelSerializer):
    team = serializers.SlugRelatedField(
        slug_field="slug", queryset=Team.objects.all(), required=False, allow_null=True
    )
    unit = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=OrgUnit.objects.all(),
        required=False,
        allow_null=True,
        help_text="Instead of a team: the unit's budget covers every team below it.",
    )
    period = serializers.RegexField(r"^\d{4}-\d{2}$", help_text="YYYY-MM")
    amount = serializers.DecimalField(max_digits=14, decimal_places=2, min_value=0)
    enforcement = serializers.ChoiceField(choices=Enforcement.choices, default=Enforcement.ALERT)
    alerts = BudgetAlertSerializer(many=True, read_only=True)
    burn_down = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = ["id", "team", "unit", "period", "amount", "enforcement", "alerts", "burn_down"]
        validators = []  # setting a budget again replaces it

    def validate(self, attrs):
        if bool(attrs.get("team")) == bool(attrs.get("unit")):
            raise serializers.ValidationError({"team": "Give either a team or a unit."})
        return attrs

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["period"] = f"{instance.period.month:%Y-%m}"
        return data

    def get_burn_down(self, obj) -> dict:
        if obj.unit_id:
            state = unit_budget_state(obj, now=timezone.now())
        else:
            state = selectors.burn_down(team=obj.team, period=obj.period, now=timezone.now())
        return decimals_as_strings(state)


class BudgetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Team budgets per month with their alerts and burn-down. Members read their teams';
    finance and platform admins read all and set them (POST replaces that team's month), for
    any open month up to 12 months ahead: a `block` budget refuses bookings in its month."""

    serializer_class = BudgetSerializer
    permission_classes = [BillingAdminWrites]
    filterset_fields = ["team__slug", "unit__slug", "enforcement"]

    def get_queryset(self):
        return (
            Budget.objects.for_user(self.request.user)
            .select_related("team", "unit", "period")
            .prefetch_related("alerts")
        )

    def perform_create(self, serializer):
        data = serializer.validated_data
        month = parse_period(
            data["period"], now=timezone.now(), months_ahead=services.BUDGET_MONTHS_AHEAD
        )
        serializer.instance = services.budget_set(
            actor=self.request.user,
            team=data.get("team"),
            unit=data.get("unit"),
            period=services.period_get_or_create(month),
            amount=data["amount"],
            enforcement=data["enforcement"],
        )
