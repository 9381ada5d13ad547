from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reports", "0013_share_links"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="prompt_chars",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
