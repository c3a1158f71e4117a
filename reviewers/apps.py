from django.apps import AppConfig


class ReviewersConfig(AppConfig):
    """The legal reviewers' portal (issue #4). It reads audit and decoding; nothing imports it."""

    name = "reviewers"
    verbose_name = "Reviewer portal"
