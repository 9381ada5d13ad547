"""Money: prices, each user's budget, and a task's reservation from submit to settlement.

Amounts are integer micro-dollars (millionths of a US dollar). A task's life in money:

* submit: the worst case (input estimate + output cap, priced) is reserved on the owner's
  budget by one conditional UPDATE, in the transaction that creates the task, so
  concurrent submissions can never reserve more than the limit (`reserved`);
* before the provider is called: the estimate made from the upload's size is replaced by
  the worst case of the calls actually planned (the one request, or every call of a plan
  of calls: each part's passages, each notes-reading call at its full window, each at its
  output cap), and the reservation topped up to it (a small .docx can hold megabytes of
  text); when the budget cannot cover that, the task fails `budget_exhausted` and the
  provider is never called;
* end: the reservation is returned and the actual cost of the task's attempts charged
  (`settled`): at the usage the provider reported or, when it answered and reported none
  (a cancel, a dropped stream, a server that never sends usage), at an estimate from the
  prompt sent and the text received (reports/worker/attempt_end.py; a worker lost
  while its text streamed likewise, reports/worker/leases.py); nothing billed at all
  returns it whole (`released`); an attempt whose outcome is unknown (no answer, a
  worker lost before any text) keeps the reservation held until an admin settles it
  (`pending_reconciliation`).

One reservation covers the whole task, retries included: an attempt the provider
refused before answering (a 429 or 5xx that is retried) costs nothing, and every attempt
that did run is charged at settlement (or left unknown). An attempt's cost is the sum of
the calls it made: a plan's notes calls and its final call; notes an earlier attempt
wrote are reused and cost nothing again. Every function that writes
runs in its caller's transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import BigIntegerField, F, Value
from django.db.models.functions import Greatest, Least

from reports.models import Attempt, Budget, CompiledRead, CompiledUpdate, CostStatus, Task
from reports.providers.base import GenerationRequest
from reports.providers.prompts import build_messages

log = logging.getLogger(__name__)

MICROS = 1_000_000
# Input estimate at submit, before any text is extracted: one token per two bytes of the
# uploads (English averages about four bytes a token; PDF and .docx files hold fewer
# characters than bytes) and of the instructions, plus the prompt's own wording.
BYTES_PER_TOKEN = 2
PROMPT_TOKENS = 1_000
MEASURED = ("provider", "estimate")  # usage sources that count as known usage
# The request actually sent, at its worst: a byte-level tokenizer never makes more tokens
# than the UTF-8 bytes it is given, and chat framing adds a few tokens a message.
FRAMING_TOKENS = 64


class BudgetExhausted(Exception):
    """The owner's remaining budget cannot cover the reservation."""

    def __init__(self, needed: int, remaining: int) -> None:
        super().__init__(
            f"Your remaining budget ({usd(remaining)}) cannot cover this report, "
            f"which reserves up to {usd(needed)}. Ask an administrator to raise it."
        )
        self.needed, self.remaining = needed, remaining


def usd(micros: int, *, exact: bool = False) -> str:
    """Return an amount of money in words: to the cent for users, and "< $0.01" for a
    sub-cent one; `exact` (for staff, who settle sub-cent costs) to a hundredth of a
    cent, rounded down."""
    if exact:
        dollars, rest = divmod(micros, MICROS)
        return f"${dollars:,}.{rest // 100:04d}"
    if 0 < micros < MICROS // 100:
        return "< $0.01"
    cents = (micros + MICROS // 200) // (MICROS // 100)  # to the nearest cent
    return f"${cents // 100:,}.{cents % 100:02d}"


def price_of(model: str) -> dict[str, int]:
    """Return the model's prices in micro-dollars per million tokens, or raise loudly."""
    try:
        return settings.REPORTS_PRICES[model]
    except KeyError:
        raise ImproperlyConfigured(
            f"No price for model {model!r}: add it to REPORTS_PRICES or set REPORTS_MODEL_PRICE."
        ) from None


def is_free(model: str) -> bool:
    """Whether the model is priced 0 (a local one): its usage, known or not, costs nothing."""
    return not any(settings.REPORTS_PRICES.get(model, {"unpriced": 1}).values())


def usage_cost(model: str, input_tokens: int, output_tokens: int, cached_tokens: int | None) -> int:
    """Return what this usage costs, in micro-dollars, rounded up.

    Cached tokens are part of the input tokens; when the provider did not say how many
    were cached, every input token is priced at the full rate.
    """
    price = price_of(model)
    cached = min(cached_tokens or 0, input_tokens)
    per_million = (
        (input_tokens - cached) * price["input"]
        + cached * price["cached_input"]
        + output_tokens * price["output"]
    )
    return -(-per_million // MICROS)


def input_estimate_tokens(input_bytes: int, instructions: str) -> int:
    """Return the most input tokens a task may send: see BYTES_PER_TOKEN.

    Never more than the model's context leaves after the output cap: longer input is cut
    to that before it is sent (reports/providers/prompts.py).
    """
    size = input_bytes + len(instructions.encode())
    estimate = -(-size // BYTES_PER_TOKEN) + PROMPT_TOKENS
    return min(estimate, settings.REPORTS_CONTEXT_TOKENS - settings.REPORTS_MAX_OUTPUT_TOKENS)


def reservation(model: str, input_bytes: int, instructions: str) -> int:
    """Return the worst case of a task: its input estimate and the output cap, priced."""
    return usage_cost(
        model,
        input_estimate_tokens(input_bytes, instructions),
        settings.REPORTS_MAX_OUTPUT_TOKENS,
        None,
    )


def budget_of(user) -> Budget:
    """Return the user's budget, created with the default limit on first use."""
    budget, _ = Budget.objects.get_or_create(
        user=user, defaults={"limit_micros": settings.REPORTS_DEFAULT_BUDGET_MICROS}
    )
    return budget


def reserve(user, amount: int) -> None:
    """Hold `amount` on the user's budget, or raise BudgetExhausted and hold nothing.

    One conditional UPDATE: it holds only while spent + reserved + amount stays within
    the limit, so no interleaving of concurrent reservations can overspend.
    """
    if _hold(user.pk, amount):  # a user's budget is made with their first upload
        return
    budget = budget_of(user)
    if not _hold(budget.user_id, amount):
        budget.refresh_from_db()
        raise BudgetExhausted(amount, budget.remaining_micros)


def _hold(user_id, amount: int) -> bool:
    return _HOLD.count(user_id, amount) == 1


def _micros() -> BigIntegerField:
    return Budget._meta.get_field("reserved_micros")


# Every upload and every report's way to its call hold money: compiled once.
_HOLD = CompiledUpdate(
    lambda user_id, amount: Budget.objects.filter(
        user_id=user_id, limit_micros__gte=F("spent_micros") + F("reserved_micros") + amount
    ),
    lambda user_id, amount: {"reserved_micros": F("reserved_micros") + amount},
    lambda user_id, amount: [
        (_micros(), amount),  # the update's value, then the filter's, by name
        (_micros(), amount),
        (Budget._meta.get_field("user"), user_id),
    ],
)


def request_input_tokens(request: GenerationRequest) -> int:
    """Return the most input tokens `request` can be billed for: see FRAMING_TOKENS.

    Never more than the context leaves after the output cap: the provider refuses a
    longer request outright, and a refused request costs nothing.
    """
    sent = sum(len(message["content"].encode()) for message in build_messages(request))
    cap = settings.REPORTS_CONTEXT_TOKENS - request.max_output_tokens
    return min(sent + FRAMING_TOKENS, cap)


def worst_case(request: GenerationRequest) -> tuple[int, int]:
    """Return the most input and output tokens `request` can be billed for."""
    return request_input_tokens(request), request.max_output_tokens


def window_worst_case(output_tokens: int) -> tuple[int, int]:
    """Return the worst case of a call whose input is not known yet (it reads notes still
    to be written): its whole window, at its output cap."""
    return settings.REPORTS_CONTEXT_TOKENS - output_tokens, output_tokens


# Every report's way to its call reads it: compiled once (reports.models.compiled).
_RESERVED = CompiledRead(
    lambda task_id, epoch: (
        Task.objects.select_for_update()
        .filter(pk=task_id, epoch=epoch, cost_status=CostStatus.RESERVED)
        .values_list("owner_id", "model", "reserved_micros")[:1]
    ),
    lambda task_id, epoch: [
        (Task._meta.get_field("cost_status"), CostStatus.RESERVED),  # the ORM's order: by name
        (Task._meta.get_field("epoch"), epoch),
        (Task._meta.pk, task_id),
    ],
)


def top_up(task_id, epoch: int, calls: list[tuple[int, int]]) -> int:
    """Raise the task's reservation to the worst case of the calls about to be made: one
    request, or every call of a plan (`worst_case` of each, in input and output tokens).

    Return what was added (0 when the reservation already covers it, or the task holds
    none, or the attempt lost its lease). Raise BudgetExhausted, holding nothing more,
    when the owner's budget cannot cover it: the provider must then not be called.
    Inside a caller's transaction (`prepared.store_made`) it takes no savepoint: what
    fails there rolls the whole back.
    """
    with transaction.atomic(savepoint=False):
        held = _RESERVED.first(task_id, epoch)  # locked till the transaction ends
        if held is None or held[1] not in settings.REPORTS_PRICES:
            return 0
        owner_id, model, reserved = held
        needed = sum(usage_cost(model, tokens, output, None) for tokens, output in calls)
        extra = needed - reserved
        if extra <= 0:
            return 0
        if not _hold(owner_id, extra):
            remaining = Budget.objects.get(user_id=owner_id).remaining_micros
            raise BudgetExhausted(needed, remaining + reserved)
        _RAISED.count(task_id, extra)
    return extra


_RAISED = CompiledUpdate(
    lambda task_id, extra: Task.objects.filter(pk=task_id),
    lambda task_id, extra: {"reserved_micros": F("reserved_micros") + extra},
    lambda task_id, extra: [
        (Task._meta.get_field("reserved_micros"), extra),
        (Task._meta.pk, task_id),
    ],
)


def attempt_cost(model: str, usage, *, billed_nothing: bool) -> int | None:
    """Return the cost of an attempt's usage; None when unknown (never a guessed 0).

    `billed_nothing`: the attempt never called the provider, or the provider refused
    the request before answering, so there is no usage to pay for. A model priced 0 (a
    local one) costs 0 whatever its usage, so none of its tasks waits for an admin.
    """
    if is_free(model):
        return 0
    if usage.source in MEASURED and None not in (usage.input_tokens, usage.output_tokens):
        return usage_cost(model, usage.input_tokens, usage.output_tokens, usage.cached_tokens)
    return 0 if billed_nothing else None


def call_cost_of(task_id, model: str, usage, *, answered: bool) -> int | None:
    """Return the cost of one call of a plan: `attempt_cost_of`, nothing billed when the
    provider never answered and reported no usage."""
    return attempt_cost_of(task_id, model, usage, billed_nothing=not answered)


def attempt_cost_of(task_id, model: str, usage, *, billed_nothing: bool) -> int | None:
    """Return `attempt_cost` priced at the task's `model` (as its claim read it); None
    (unknown) when it has no price.

    A model that lost its price since the task was submitted must not stop the attempt's
    end from being written: its cost waits for an admin instead.
    """
    if model not in settings.REPORTS_PRICES:
        if model:
            log.error("no price for model %r: the cost of task %s is left unknown", model, task_id)
        return None
    return attempt_cost(model, usage, billed_nothing=billed_nothing)


def settle_task(task_id) -> str | None:
    """Settle or release the reservation of a task that just ended; return its cost status.

    When any attempt's cost is unknown, the reservation stays held and the task waits in
    `pending_reconciliation` for an admin (`settle_pending`). None when the task holds no
    reservation (it was created before budgets, or was settled already).
    """
    task = _holding(task_id, CostStatus.RESERVED)
    if task is None:
        return None
    attempts = _attempt_costs(task_id)
    costs = [0] if is_free(task.model) else attempts.costs  # even an unknown one (a lost worker)
    if None in costs:
        Task.objects.filter(pk=task_id, cost_status=CostStatus.RESERVED).update(
            cost_status=CostStatus.PENDING_RECONCILIATION
        )
        return CostStatus.PENDING_RECONCILIATION
    return _settle(task, CostStatus.RESERVED, sum(costs), attempts.measured)


def settle_pending(task_id, unknown_cost: int) -> str | None:
    """Settle a task whose usage was unknown, charging `unknown_cost` for the unknown part.

    An admin enters the unknown part from the provider's records, or accepts the
    reservation as the cost (`unknown_cost_at_reservation`). Return the new cost
    status, or None when the task is not waiting for reconciliation.
    """
    task = _holding(task_id, CostStatus.PENDING_RECONCILIATION)
    if task is None:
        return None
    attempts = _attempt_costs(task_id)
    return _settle(
        task, CostStatus.PENDING_RECONCILIATION, attempts.known + unknown_cost, attempts.measured
    )


def estimated_attempt(task_id) -> Attempt | None:
    """Return the latest attempt of a settled task that was charged at an estimate (a
    dropped stream, a cancel, a lost worker): one an admin may correct."""
    return (
        Attempt.objects.filter(
            task_id=task_id, usage_source="estimate", task__cost_status=CostStatus.SETTLED
        )
        .order_by("-number")
        .first()
    )


def correct_estimate(task_id, input_tokens: int, output_tokens: int, cached_tokens) -> int | None:
    """Charge an estimated attempt of a settled task at the usage the provider's records
    give instead; return the task's new cost, or None when it has no estimate to correct.

    The attempt's usage becomes the provider's; what its cost held beyond its tokens (the
    notes calls of a plan its worker finished before it was lost) stays. The difference
    is charged to, or given back to, the owner's budget, never below nothing spent nor
    above its limit.
    """
    with transaction.atomic():
        task = (
            Task.objects.select_for_update()
            .filter(pk=task_id, cost_status=CostStatus.SETTLED)
            .only("id", "owner_id", "model", "cost_micros")
            .first()
        )
        attempt = estimated_attempt(task_id) if task is not None else None
        if attempt is None:
            return None
        recorded = usage_cost(
            task.model,
            attempt.input_tokens or 0,
            attempt.output_tokens or 0,
            attempt.cached_tokens,
        )
        rest = max(0, (attempt.cost_micros or 0) - recorded)
        cost = rest + usage_cost(task.model, input_tokens, output_tokens, cached_tokens)
        delta = cost - (attempt.cost_micros or 0)
        Attempt.objects.filter(pk=attempt.pk).update(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            usage_source="provider",
            cost_micros=cost,
        )
        new_cost = max(0, (task.cost_micros or 0) + delta)
        Task.objects.filter(pk=task.pk).update(cost_micros=new_cost)
        room = F("limit_micros") - F("reserved_micros")
        Budget.objects.filter(user_id=task.owner_id).update(
            spent_micros=Greatest(
                Value(0), Least(F("spent_micros") + delta, room), output_field=BigIntegerField()
            )
        )
    return new_cost


def unknown_cost_at_reservation(task_id) -> int:
    """Return the unknown part's cost if the task's whole reservation is taken as spent."""
    task = Task.objects.only("reserved_micros").get(pk=task_id)
    return max(0, task.reserved_micros - _attempt_costs(task_id).known)


def hold_again(task_id) -> bool:
    """Put a pending task's held reservation back to work: an admin runs the task again.

    Its unknown attempt stays unknown, so when the task ends it waits for an admin again.
    """
    return bool(
        Task.objects.filter(pk=task_id, cost_status=CostStatus.PENDING_RECONCILIATION).update(
            cost_status=CostStatus.RESERVED
        )
    )


def _holding(task_id, status: str) -> Task | None:
    return _HOLDING.instance(task_id, status)


# Every task's end settles its money: these are compiled once (reports.models.compiled).
_HOLDING = CompiledRead(
    lambda task_id, status: (
        Task.objects.filter(pk=task_id, cost_status=status)
        .only("id", "owner_id", "reserved_micros", "model")
        .order_by("pk")[:1]
    ),
    lambda task_id, status: [
        (Task._meta.get_field("cost_status"), status),  # the ORM's order: by name
        (Task._meta.pk, task_id),
    ],
)
_ATTEMPT_COSTS = CompiledRead(
    lambda task_id: Attempt.objects.filter(task_id=task_id).values_list(
        "cost_micros", "usage_source"
    ),
    lambda task_id: [(Attempt._meta.get_field("task"), task_id)],
)
_SETTLED = CompiledUpdate(
    lambda task_id, frm, status, cost: Task.objects.filter(pk=task_id, cost_status=frm),
    lambda task_id, frm, status, cost: {
        "cost_status": status,
        "cost_micros": cost,
        "reserved_micros": 0,
    },
    lambda task_id, frm, status, cost: [
        (Task._meta.get_field("cost_status"), status),
        (Task._meta.get_field("cost_micros"), cost),
        (Task._meta.get_field("reserved_micros"), 0),
        (Task._meta.get_field("cost_status"), frm),  # the filter's, by name
        (Task._meta.pk, task_id),
    ],
)
_CHARGED = CompiledUpdate(
    lambda user_id, cost, held: Budget.objects.filter(user_id=user_id),
    lambda user_id, cost, held: {
        "spent_micros": F("spent_micros")
        + Least(
            Value(cost),
            F("limit_micros") - F("spent_micros") - F("reserved_micros") + held,
            output_field=BigIntegerField(),
        ),
        "reserved_micros": F("reserved_micros") - held,
    },
    lambda user_id, cost, held: [
        (_micros(), cost),
        (_micros(), held),
        (_micros(), held),
        (Budget._meta.get_field("user"), user_id),
    ],
)


@dataclass(frozen=True)
class _AttemptCosts:
    costs: list[int | None]  # each attempt's, None when unknown
    measured: bool  # some attempt's usage was known (even if it cost nothing)

    @property
    def known(self) -> int:
        return sum(cost for cost in self.costs if cost is not None)


def _attempt_costs(task_id) -> _AttemptCosts:
    rows = _ATTEMPT_COSTS.rows(task_id)
    return _AttemptCosts([cost for cost, _ in rows], any(source in MEASURED for _, source in rows))


def _settle(task: Task, frm: str, cost: int, measured: bool) -> str | None:
    """Return the reservation to the budget and charge `cost`, as far as the limit allows;
    `measured`: some attempt's usage was known, so a cost of 0 is settled, not released.

    A cost above the reservation (an input estimate beaten by a pathological document)
    is charged only up to the limit, so spent + reserved never exceeds it; the task
    records its whole cost.
    """
    status = CostStatus.SETTLED if cost or measured else CostStatus.RELEASED
    if _SETTLED.count(task.pk, frm, status, cost) != 1:
        return None
    _CHARGED.count(task.owner_id, cost, task.reserved_micros)
    return status
