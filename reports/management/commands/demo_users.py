from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

# The README states these; they exist only where this command is run (the demo).
DEMO_USERS = [("alice", "alice-demo-pass", True), ("bob", "bob-demo-pass", False)]


class Command(BaseCommand):
    help = "Create the demo users alice (also an admin) and bob, or reset their passwords."

    def handle(self, *args, **options):
        User = get_user_model()
        for username, password, staff in DEMO_USERS:
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_staff = user.is_superuser = staff
            user.save()
            self.stdout.write(f"demo user {username} / {password}{' (admin)' if staff else ''}")
