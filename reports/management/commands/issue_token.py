from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from reports.models import ApiToken


class Command(BaseCommand):
    help = "Issue a personal API token for a user; the token is printed alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default="", help="What the token is for.")

    def handle(self, *args, username, label, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        token = ApiToken.objects.issue(user, label)
        self.stdout.write(
            f"Token for {username} (shown once; send it as 'Authorization: Bearer <token>'):"
        )
        self.stdout.write(token)
