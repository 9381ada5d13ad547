"""GET /version and the X-App-Version header: which build answers."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_version_names_the_package_and_commit(client):
    response = client.get("/version")
    assert response.status_code == 200
    version = response.json()["app_version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+(\+g[0-9a-f]{4,40})?", version), version
    assert response["X-App-Version"] == version


def test_app_version_setting_wins_everywhere(client, alice_client, settings):
    settings.APP_VERSION = "2026.11.30-rc1"
    assert client.get("/version").json() == {"app_version": "2026.11.30-rc1"}
    for response in (client.get("/accounts/login/"), alice_client.get("/api/tasks")):
        assert response["X-App-Version"] == "2026.11.30-rc1"


def test_version_is_read_only(client):
    assert client.post("/version").status_code == 405
