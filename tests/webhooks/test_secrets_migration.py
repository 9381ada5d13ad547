"""The migration that seals the secrets already stored: forwards every row is sealed (a
secret of the old column's full 64 characters fits), backwards every row is open again as
it was; a secret no key opens stops the way back and leaves every row as it was."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.exceptions import IrreversibleError
from django.db.migrations.executor import MigrationExecutor

from reports.models import WebhookEndpoint
from reports.webhooks import endpoints, sealing

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("reports", "0016_webhooks")]
AFTER = [("reports", "0017_webhook_secrets_sealed")]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def stored(column: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT url, {column} FROM reports_webhookendpoint")
        return dict(cursor.fetchall())


@pytest.fixture
def at_the_latest():
    """Leave the test database at the latest migration, whatever the test did to it."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_migration_seals_every_secret_and_opens_them_again_backwards(
    alice, at_the_latest, settings
):
    secrets = {"https://a.example/": endpoints.new_secret(), "https://b.example/": "s" * 64}
    apps = migrate(BEFORE)
    user = apps.get_model("auth", "User").objects.get(pk=alice.pk)
    for url, secret in secrets.items():
        apps.get_model("reports", "WebhookEndpoint").objects.create(
            user=user, url=url, secret=secret
        )

    migrate(AFTER)

    sealed = stored("sealed_secret")
    for url, secret in secrets.items():
        assert secret not in sealed[url]
        assert len(sealed[url]) <= 200  # the column's length
        assert sealing.unseal(sealed[url]) == secret

    # Backwards from a key that has moved to the fallbacks: still opened.
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-newer-key-" + "k" * 40
    migrate(BEFORE)

    assert stored("secret") == secrets


def test_a_secret_no_key_opens_stops_the_way_back_and_changes_nothing(
    alice, at_the_latest, settings
):
    WebhookEndpoint.objects.create(
        user=alice, url="https://a.example/", sealed_secret=sealing.seal(endpoints.new_secret())
    )
    before = stored("sealed_secret")
    settings.SECRET_KEY = "a-key-that-sealed-nothing-" + "k" * 30

    with pytest.raises(IrreversibleError, match="SECRET_KEY_FALLBACKS"):
        migrate(BEFORE)

    assert stored("sealed_secret") == before
