from django.apps import AppConfig


class DecodingConfig(AppConfig):
    name = "decoding"
    verbose_name = "Decoding"

    def ready(self) -> None:
        # Verification (audit) checks each job row against its trail through this source.
        from audit import claims
        from decoding.claims import JobClaims
        from pathfinder_site import checks  # noqa: F401 - registers the deployment checks

        claims.register(JobClaims())
