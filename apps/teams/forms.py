from django import forms

from apps.teams.choices import TeamRole
from apps.teams.models import User


class MembershipAddForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=TeamRole.choices, initial=TeamRole.MEMBER)

    def clean_username(self) -> User:
        username = self.cleaned_data["username"].strip()
        try:
            return User.objects.get(username=username, is_active=True)
        except User.DoesNotExist:
            raise forms.ValidationError(f"No active user named “{username}”.") from None


class MembershipRoleForm(forms.Form):
    role = forms.ChoiceField(choices=TeamRole.choices)
