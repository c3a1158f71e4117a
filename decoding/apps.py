from django.apps import AppConfig


class DecodingConfig(AppConfig):
    name = "decoding"
    verbose_name = "Decoding"
