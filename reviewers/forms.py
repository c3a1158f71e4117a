"""Input of the portal's pages. A bad value is a 400 whose message names the field."""

import datetime

from django import forms
from django.core.validators import MaxValueValidator

from decoding.models import GenerationJob, ModelSpec

from .selectors import JobFilters, matter_list_for

# The last page number any list of the portal takes: past every list, and past what the
# database can offset.
MAX_PAGE = 100_000

VERIFICATION_CHOICES = [
    ("", "any"),
    ("never", "never verified"),
    ("verified", "verified"),
    ("broken", "broken"),
]


class DayField(forms.DateField):
    """A UTC day of a date filter. Each is taken to the start of the day after it, so the last
    representable day is refused here (a 400 naming the field), not by an OverflowError."""

    default_validators = [MaxValueValidator(datetime.date.max - datetime.timedelta(days=1))]

    def __init__(self, **kwargs):
        super().__init__(required=False, widget=forms.DateInput(attrs={"type": "date"}), **kwargs)


def _days_in_order(form: forms.Form) -> dict:
    """A form's clean(): its since and until days, when both are given, in order."""
    data = forms.Form.clean(form)
    since, until = data.get("since"), data.get("until")
    if since and until and since > until:
        form.add_error("until", "until must not be before since")
    return data


class JobFilterForm(forms.Form):
    matter = forms.ModelChoiceField(queryset=None, required=False, empty_label="all my matters")
    since = DayField()
    until = DayField()
    model = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any"), *GenerationJob.Status.choices])
    verified = forms.ChoiceField(required=False, choices=VERIFICATION_CHOICES, label="Verification")
    q = forms.CharField(
        required=False,
        max_length=128,
        label="Search",
        widget=forms.TextInput(
            attrs={"placeholder": "words asked or answered, a job id or request id"}
        ),
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["matter"].queryset = matter_list_for(user=user)
        names = ModelSpec.objects.order_by("name").values_list("name", flat=True)
        self.fields["model"].choices = [("", "any"), *((name, name) for name in names)]

    def filters(self) -> JobFilters:
        data = self.cleaned_data
        return JobFilters(
            matter=data.get("matter"),
            since=data.get("since"),
            until=data.get("until"),
            model=data.get("model") or "",
            status=data.get("status") or "",
            verification=data.get("verified") or "",
            q=(data.get("q") or "").strip(),
        )

    clean = _days_in_order


class MatterExportForm(forms.Form):
    """Which matter to produce, and optionally the first and last day (UTC) of its jobs."""

    matter = forms.ModelChoiceField(queryset=None, empty_label=None)
    since = DayField()
    until = DayField()

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["matter"].queryset = matter_list_for(user=user)

    clean = _days_in_order


class StepForm(forms.Form):
    step = forms.IntegerField(required=False, min_value=0)


class AnnotationForm(forms.Form):
    text = forms.CharField(max_length=10_000, widget=forms.Textarea(attrs={"rows": 3}))
    step = forms.IntegerField(required=False, min_value=0)

    def __init__(self, *args, step_count: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_count = step_count

    def clean_step(self):
        step = self.cleaned_data.get("step")
        if step is not None and step >= self.step_count:
            raise forms.ValidationError(f"the trail has no step {step}")
        return step


class CustodyPageForm(forms.Form):
    before = forms.IntegerField(required=False, min_value=0)


def errors_text(form: forms.Form) -> str:
    """'field: message' for every error, for a plain-text 400."""
    return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in form.errors.items())
