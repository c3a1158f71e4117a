"""The one-time-password page: enrol a TOTP device on first use, then verify a code from it.

A person's device is created unconfirmed and shown once (its secret and otpauth URI, for any
authenticator app); the first correct code confirms it. django-otp throttles wrong codes.
"""

from base64 import b32encode

from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice


class CodeForm(forms.Form):
    code = forms.CharField(max_length=8, label="Code from your authenticator app")


@login_required
def mfa(request):
    device = TOTPDevice.objects.filter(user=request.user).order_by("-confirmed", "id").first()
    if device is None:
        device = TOTPDevice.objects.create(user=request.user, name="default", confirmed=False)
    form = CodeForm(request.POST or None)
    if form.is_valid():
        if device.verify_token(form.cleaned_data["code"].strip()):
            if not device.confirmed:
                device.confirmed = True
                device.save(update_fields=["confirmed"])
            otp_login(request, device)
            return redirect(_next(request))
        form.add_error("code", "That code is not right (or came too late); try the next one.")
    context = {"form": form, "enrolling": not device.confirmed, "next": _next(request)}
    if not device.confirmed:
        context |= {"secret": b32encode(device.bin_key).decode(), "config_url": device.config_url}
    return render(request, "registration/mfa.html", context)


def _next(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or "/portal/"
    safe = url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()})
    return target if safe else "/portal/"
