"""The home page's task list says which reports were read in a plan of calls."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_a_planned_task_is_marked_with_its_parts(alice_client, make_task):
    planned, single = make_task(), make_task()
    planned.plan = {"parts": 12, "rounds": 1, "calls": 14}
    planned.save(update_fields=["plan"])
    single.plan = {"parts": 0, "rounds": 0, "calls": 1}
    single.save(update_fields=["plan"])
    page = alice_client.get("/").content.decode()
    assert re.findall(r"<span data-plan>(.*?)</span>", page) == ["read in 12 parts"]
