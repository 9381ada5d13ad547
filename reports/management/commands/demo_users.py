from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

# The README states these; they exist only where this command is run (the demo).
DEMO_USERS = [("alice", "alice-demo-pass", True), ("bob", "bob-demo-pass", False)]


class Command(BaseCommand):
    help = "Create the demo users alice (also an admin) and bob where they are missing."

    def handle(self, *args, **options):
        User = get_user_model()
        for username, password, staff in DEMO_USERS:
            user, created = User.objects.get_or_create(
                username=username, defaults={"is_staff": staff, "is_superuser": staff}
            )
            # A new hash of the same password would sign out every session of the user
            # (sessions are bound to the hash): set it only where it does not work.
            if created or not user.check_password(password):
                user.set_password(password)
                user.save(update_fields=["password"])
            self.stdout.write(f"demo user {username} / {password}{' (admin)' if staff else ''}")
