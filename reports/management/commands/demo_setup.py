from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from reports.management.commands.demo_users import DEMO_USERS


def unapplied_migrations() -> list:
    """Return the migrations the database has not applied yet, in order."""
    executor = MigrationExecutor(connection)
    return executor.migration_plan(executor.loader.graph.leaf_nodes())


class Command(BaseCommand):
    help = (
        "Make the demo's database ready, doing only what is not done yet: apply the "
        "migrations it lacks, create the demo users that are missing."
    )

    def handle(self, *args, **options):
        if unapplied_migrations():
            call_command("migrate", interactive=False, stdout=self.stdout)
        else:
            self.stdout.write("migrations: up to date")
        User = get_user_model()
        present = set(
            User.objects.filter(username__in=[u for u, _, _ in DEMO_USERS]).values_list(
                "username", flat=True
            )
        )
        if len(present) < len(DEMO_USERS):
            # Hashing a password takes a good part of a second: only for new users.
            call_command("demo_users", stdout=self.stdout)
        else:
            self.stdout.write("demo users: present (manage.py demo_users resets them)")
