from django.core.management.base import BaseCommand

from reports.webhooks import endpoints


class Command(BaseCommand):
    help = (
        "Seal every webhook signing secret under the current SECRET_KEY; run it after a new "
        "key takes over, before the old one leaves SECRET_KEY_FALLBACKS."
    )

    def handle(self, *args, **options):
        done = endpoints.reseal_all()
        self.stdout.write(
            f"Resealed {done.resealed} webhook secret(s) under the current SECRET_KEY; "
            f"{done.current} already were."
        )
        if done.unreadable:
            self.stderr.write(
                f"{done.unreadable} webhook secret(s) open with no key of this server: their "
                "deliveries fail and their endpoints are turned off until their owners get a "
                "new secret (or the key they were sealed under is put back in "
                "DJANGO_SECRET_KEY_FALLBACKS)."
            )
