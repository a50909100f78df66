"""What people read in forms and Django admin spells GPU, GPU-hour and kWh as written, and
admin names its lists in proper plurals."""

import pytest
from django.contrib import admin
from django.test import Client

from apps.billing.forms import RateCardForm
from apps.billing.models import LedgerEntry, RateCard
from apps.efficiency.models import AllocationSummary, DigestSent
from apps.fleet.models import Gpu, GpuModel
from apps.teams.forms import QuotaForm
from apps.teams.models import User


def test_rate_card_form_labels():
    labels = {name: field.label for name, field in RateCardForm().fields.items()}
    assert labels["gpu_model"] == "GPU model"
    assert labels["price_per_gpu_hour"] == "Price per GPU-hour"
    assert labels["energy_price_per_kwh"] == "Energy price per kWh"


def test_quota_form_names_the_gpu_model():
    assert QuotaForm.base_fields["gpu_model"].label == "GPU model"


def test_model_field_names_spell_gpu_and_kwh():
    field = RateCard._meta.get_field
    assert field("gpu_model").verbose_name == "GPU model"
    assert field("price_per_gpu_hour").verbose_name == "price per GPU-hour"
    assert field("energy_price_per_kwh").verbose_name == "energy price per kWh"
    assert Gpu._meta.get_field("uuid").verbose_name == "UUID"


@pytest.mark.parametrize(
    ("model", "plural"),
    [
        (Gpu, "GPUs"),
        (GpuModel, "GPU models"),
        (AllocationSummary, "allocation summaries"),
        (DigestSent, "digests sent"),
        (LedgerEntry, "ledger entries"),
    ],
)
def test_plural_names(model, plural):
    assert model._meta.verbose_name_plural == plural


@pytest.mark.django_db
def test_admin_index_lists_proper_plurals():
    superuser = User.objects.create_superuser("super", "super@example.com", "pw-for-tests-1!")
    client = Client()
    client.force_login(superuser)
    html = client.get("/admin/").content.decode()
    assert ">GPUs<" in html and ">GPU models<" in html
    assert ">Allocation summaries<" in html
    assert "summarys" not in html and ">Gpus<" not in html
    assert Gpu in admin.site._registry
