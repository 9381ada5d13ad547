"""Webhook signing secrets sealed at rest (docs/webhooks.md#the-secret): every stored secret
is sealed under the current SECRET_KEY; backwards, each is opened again (with SECRET_KEY or
a fallback), and a secret no key opens stops the way back rather than being lost."""

from django.db import migrations, models
from django.db.migrations.exceptions import IrreversibleError

from reports.webhooks import sealing


def seal_secrets(apps, schema_editor):
    endpoints = apps.get_model("reports", "WebhookEndpoint").objects
    for pk, secret in list(endpoints.values_list("pk", "sealed_secret")):
        endpoints.filter(pk=pk).update(sealed_secret=sealing.seal(secret))


def open_secrets(apps, schema_editor):
    endpoints = apps.get_model("reports", "WebhookEndpoint").objects
    unreadable = []
    for pk, token in list(endpoints.values_list("pk", "sealed_secret")):
        try:
            endpoints.filter(pk=pk).update(sealed_secret=sealing.unseal(token))
        except sealing.Unreadable:
            unreadable.append(str(pk))
    if unreadable:
        raise IrreversibleError(
            f"{len(unreadable)} webhook endpoint(s) have a secret that neither SECRET_KEY nor "
            f"SECRET_KEY_FALLBACKS opens (first: {unreadable[0]}); put the key they were "
            "sealed under back in DJANGO_SECRET_KEY_FALLBACKS, or remove them, then migrate "
            "back again."
        )


class Migration(migrations.Migration):

    dependencies = [
        ("reports", "0016_webhooks"),
    ]

    operations = [
        # A Fernet token of a secret of up to 64 characters is 184.
        migrations.AlterField(
            model_name="webhookendpoint",
            name="secret",
            field=models.CharField(max_length=200),
        ),
        migrations.RenameField(
            model_name="webhookendpoint",
            old_name="secret",
            new_name="sealed_secret",
        ),
        migrations.RunPython(seal_secrets, open_secrets),
    ]
