from django.apps import AppConfig


class DecodingConfig(AppConfig):
    name = "decoding"
    verbose_name = "Decoding"

    def ready(self) -> None:
        # Verification (audit) checks each job row against its trail through this source.
        from audit import claims
        from decoding.claims import JobClaims

        claims.register(JobClaims())
