from django.db import migrations


class Migration(migrations.Migration):
    """A task's failure message is the user's wording; the provider's stays on the attempt."""

    dependencies = [
        ("reports", "0007_merge_0006_attempt_parsing_since_0006_worker_error"),
    ]

    operations = [
        migrations.RenameField(model_name="task", old_name="error_message", new_name="user_message"),
    ]
