from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from reports.models import ApiToken


class Command(BaseCommand):
    help = "Revoke a user's API tokens: all of them, or those with the given label."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default=None, help="Revoke only tokens with this label.")

    def handle(self, *args, username, label, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        tokens = ApiToken.objects.filter(user=user)
        if label is not None:
            tokens = tokens.filter(label=label)
        count, _ = tokens.delete()
        self.stdout.write(f"Revoked {count} token(s) of {username}.")
