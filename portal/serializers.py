"""Serializer behaviour shared by every app's API."""

from collections.abc import Mapping

from rest_framework import serializers


class RefuseUnknownFieldsMixin:
    """A write payload may carry only the serializer's writable fields.

    DRF drops unknown and read-only keys without a word, so a client that sends one believes it
    took effect (an adjustment posted with `"period": "2026-10"` was booked in the current month).
    With this mixin such a key is a 400 field error instead. `Meta.read_only_hints` may give a
    field's error a sentence saying what to send instead.
    """

    def to_internal_value(self, data):
        refused = self._refused_fields(data)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as invalid:
            if refused and isinstance(invalid.detail, dict):
                invalid.detail.update(refused)
            raise
        if refused:
            raise serializers.ValidationError(refused)
        return value

    def _refused_fields(self, data) -> dict:
        if not isinstance(data, Mapping):
            return {}
        hints = getattr(getattr(self, "Meta", None), "read_only_hints", {})
        refused = {}
        for key in data:
            field = self.fields.get(key)
            if field is not None and not field.read_only:
                continue
            if field is None:
                refused[key] = ["Unknown field; it would be ignored, so it is refused."]
            else:
                refused[key] = [hints.get(key, "This field is read-only and cannot be set.")]
        return refused
