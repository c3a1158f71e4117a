from django.apps import AppConfig


class ReviewersConfig(AppConfig):
    """The legal reviewers' portal (issue #4): it reads audit and decoding, nothing depends on it."""

    name = "reviewers"
    verbose_name = "Reviewer portal"
