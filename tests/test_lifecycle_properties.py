"""Random interleavings of create, claim, heartbeat, stream, expire, reap, cancel and
complete never break the lifecycle's promises (docs/lifecycle.md, docs/architecture.md's leases)."""

import contextlib
import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from django.core.files.storage import storages
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from reports import lifecycle
from reports.clock import FakeClock
from reports.models import TERMINAL, TRANSITIONS, Attempt, Budget, Task, TaskEvent
from reports.worker import leases
from reports.worker.pipeline import AttemptRun
from tests.helpers import REPORT, ScriptedProvider, make_submission, saved_report, stored_files

LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


async def finishes_the_report(request, clock):
    from reports.providers.base import Completed, TextDelta

    yield TextDelta(REPORT)
    yield Completed("stop")


class TaskLifecycle(RuleBasedStateMachine):
    tasks = Bundle("tasks")

    def __init__(self, user) -> None:
        super().__init__()
        self.user = user
        self.claims: dict = {}
        self.ended: dict = {}
        self.clock = FakeClock()
        Task.objects.all().delete()
        Budget.objects.all().delete()  # deleting tasks would leave their reservations held
        for name in stored_files("results"):
            storages["reports"].delete(f"results/{name}")

    @rule(target=tasks)
    def create(self):
        return make_submission(self.user).pk

    @rule()
    def claim(self):
        claim = leases.claim_next_task("w")
        if claim is not None:
            self.claims.setdefault(claim.task_id, []).append(claim)

    def _claim_of(self, task_id, stale: bool):
        claims = self.claims.get(task_id)
        if not claims:
            return None
        return claims[0] if stale else claims[-1]

    @rule(task=tasks, stale=st.booleans())
    def heartbeat(self, task, stale):
        claim = self._claim_of(task, stale)
        if claim is not None:
            with contextlib.suppress(leases.LeaseLost):
                leases.renew_lease(task, claim.epoch)

    @rule(task=tasks, stale=st.booleans(), text=st.text(min_size=1, max_size=6))
    def stream(self, task, stale, text):
        claim = self._claim_of(task, stale)
        if claim is not None:
            Task.objects.append_event(
                task, claim.epoch, "delta", {"text": text, "attempt": claim.number}
            )

    @rule(task=tasks)
    def worker_dies(self, task):
        """The worker holding the task stops renewing; its lease runs out and is reaped."""
        Task.objects.filter(pk=task, lease_expires_at__isnull=False).update(
            lease_expires_at=LONG_AGO
        )
        leases.reap_expired_leases()

    @rule(task=tasks)
    def cancel(self, task):
        lifecycle.cancel_task(Task.objects.get(pk=task))

    @rule(task=tasks, stale=st.booleans())
    def complete(self, task, stale):
        """Run the rest of an attempt with the real runner: it ends it, or writes nothing."""
        claim = self._claim_of(task, stale)
        if claim is not None:
            provider = ScriptedProvider(finishes_the_report, self.clock)
            async_to_sync(AttemptRun(claim, provider, self.clock).run)()

    @invariant()
    def terminal_states_never_change(self):
        for task_id, status in Task.objects.values_list("pk", "status"):
            if task_id in self.ended:
                assert status == self.ended[task_id]
            elif status in TERMINAL:
                self.ended[task_id] = status

    @invariant()
    def events_are_contiguous_and_only_legal_transitions_happen(self):
        for task in Task.objects.all():
            events = list(TaskEvent.objects.filter(task=task).order_by("seq"))
            assert [e.seq for e in events] == list(range(1, task.last_seq + 1))
            status = "queued"
            for event in events:
                new = event.data["status"] if event.type == "status" else event.type
                if new != "delta":
                    assert new in TRANSITIONS[status], (status, new)
                    status = new
            assert status == task.status

    @invariant()
    def one_writer_per_task(self):
        for claims in self.claims.values():
            assert len({c.epoch for c in claims}) == len(claims)

    @invariant()
    def succeeded_iff_exactly_one_saved_file_of_the_winning_attempt(self):
        succeeded = Task.objects.filter(status="succeeded")
        assert stored_files("results") == sorted(f"{t.result_id}.md" for t in succeeded)
        for task in succeeded:
            winner = Attempt.objects.filter(task=task).order_by("-number").first()
            assert winner.status == "succeeded"
            assert saved_report(task) == winner.text == REPORT

    @invariant()
    def money_adds_up(self):
        """The budget holds exactly what live tasks reserve, within its limit; an ended
        task holds money only while its cost is unknown."""
        budget = Budget.objects.filter(user=self.user).first()
        if budget is None:
            return
        held = sum(Task.objects.values_list("reserved_micros", flat=True))
        assert budget.reserved_micros == held
        assert budget.spent_micros + budget.reserved_micros <= budget.limit_micros
        for status, cost_status, reserved in Task.objects.values_list(
            "status", "cost_status", "reserved_micros"
        ):
            if status in TERMINAL:
                assert cost_status in {"settled", "released", "pending_reconciliation"}
                assert (reserved > 0) == (cost_status == "pending_reconciliation")
            else:
                assert cost_status == "reserved"


@pytest.mark.django_db
def test_the_lifecycle_keeps_its_promises_under_any_interleaving(alice, settings):
    settings.REPORTS_MAX_ATTEMPTS = 3
    settings.REPORTS_MAX_RUNNING = 2

    class Machine(TaskLifecycle):
        def __init__(self):
            super().__init__(alice)

    Machine.TestCase.settings = hypothesis_settings(
        max_examples=60,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    Machine.TestCase().runTest()
