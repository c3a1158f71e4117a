"""manage.py generate: one audited generation from the command line, run in this process."""

import json

from django.core.management.base import BaseCommand, CommandError

from decoding.engine import PARAM_NAMES, bounds_of
from decoding.job_input import InvalidInput
from decoding.models import GenerationJob, Matter
from decoding.protocol.native_input import GenerationInput
from decoding.selectors import job_answer
from decoding.services import job_submit
from decoding.worker.execution import job_run


class Command(BaseCommand):
    help = "Generate text for a prompt with the audit trail on; print text, stats and the trail."

    def add_arguments(self, parser):
        parser.add_argument("--prompt", required=True)
        parser.add_argument("--chat", action="store_true", help="send the prompt as a user message")
        parser.add_argument("--model", help="model spec name (default: PATHFINDER_DEFAULT_MODEL)")
        parser.add_argument("--matter", default="command-line")
        for name, bounds in bounds_of().items():  # every generation parameter, as the APIs'
            parser.add_argument("--" + name.replace("_", "-"), type=bounds.kind, help=bounds.help)
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        request = {
            field: options[field] for field in ("model", *PARAM_NAMES) if options[field] is not None
        }
        if options["chat"]:
            request["messages"] = [{"role": "user", "content": options["prompt"]}]
        else:
            request["prompt"] = options["prompt"]
        # The native API's shape checks, then the service's (decoding.job_input): the command
        # refuses what the API refuses, naming the same field.
        shape = GenerationInput(data=request)
        if not shape.is_valid():
            field, errors = next(iter(shape.errors.items()))
            raise CommandError(f"{field}: {errors[0]}")
        matter, _ = Matter.objects.get_or_create(name=options["matter"])
        try:
            job, _ = job_submit(matter=matter, api_key=None, enqueue=False, **shape.validated_data)
        except InvalidInput as exc:
            raise CommandError(f"{exc.field}: {exc}") from exc
        job_run(job_id=job.id)
        job.refresh_from_db()
        self._print(job, as_json=options["json"])
        if job.status != GenerationJob.Status.SUCCEEDED:
            raise CommandError(f"job {job.id} failed: {job.error}")

    def _print(self, job: GenerationJob, *, as_json: bool) -> None:
        answer = job_answer(job)
        text = answer.text if answer else ""
        summary = {
            "job": str(job.id),
            "trail": str(job.trail_id),
            "model": job.model_spec.name,
            "status": job.status,
            "output_text": text,
            "tokens": len(answer.token_ids) if answer else 0,
            "drafted": job.drafted,
            "accepted": job.accepted,
            "acceptance_rate": round(job.acceptance_rate, 4),
            "mean_accepted_length": round(job.mean_accepted_length, 3),
            "prefill_ms": job.prefill_ms,
            "decode_ms": job.decode_ms,
            "audit_ms": job.audit_ms,
        }
        if as_json:
            self.stdout.write(json.dumps(summary, indent=2))
            return
        self.stdout.write(text)
        self.stdout.write("")
        self.stdout.write(
            f"{summary['tokens']} tokens, {job.accepted}/{job.drafted} drafted accepted "
            f"(rate {summary['acceptance_rate']}, mean accepted length "
            f"{summary['mean_accepted_length']}); decode {job.decode_ms} ms, "
            f"prefill {job.prefill_ms} ms, audit {job.audit_ms} ms"
        )
        self.stdout.write(f"job {job.id}  trail {job.trail_id}")
