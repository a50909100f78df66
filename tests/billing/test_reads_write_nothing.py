"""Reading billing (the chargeback API, usage, the finance pages) never creates a billing period:
a month without its row answers as an empty open draft."""

import pytest
from django.utils import timezone

from apps.billing.models import BillingPeriod
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_reading_this_months_billing_creates_no_period(client, finance_user, member):
    this_month = f"{timezone.now():%Y-%m}"
    api = client_for(finance_user)
    for export in ("json", "csv", "focus"):
        response = api.get(f"/api/v1/chargeback/?period={this_month}&format={export}")
        assert response.status_code == 200, export
        b"".join(response.streaming_content)  # the export runs to the end
    assert client_for(member).get(f"/api/v1/usage/?period={this_month}").status_code == 200
    client.force_login(finance_user)
    for page in ("/billing/", f"/billing/?period={this_month}", "/billing/cost/"):
        response = client.get(page)
        assert response.status_code == 200, page
    assert not BillingPeriod.objects.exists()
    draft = client.get(f"/billing/?period={this_month}").content.decode()
    assert "open" in draft.lower()
