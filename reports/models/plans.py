"""What a task reads and how: its passages, and the calls of its plan (docs/api.md,
"Passages, parts and citations")."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from reports.models.tasks import Task


class SourcePassage(models.Model):
    """A passage of a task's documents (reports/passages.py), stored at the parse stage so
    that citations resolve and a later attempt reads the same passages."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="passages")
    number = models.PositiveIntegerField()  # S<number>
    document = models.CharField(max_length=255)
    section = models.CharField(max_length=500, blank=True)
    page = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="unique_passage_number")
        ]

    def __str__(self) -> str:
        return f"S{self.number} of {self.task_id}"

    @property
    def passage_id(self) -> str:
        return f"S{self.number}"


class PlanCall(models.Model):
    """One provider call of a task's plan that writes notes: a part (its passages) or a
    round that combines notes. Its notes and usage are saved in the transaction that ends
    it, so any later attempt reuses them instead of calling the provider again."""

    class Kind(models.TextChoices):
        PART = "part"
        ROUND = "round"

    class CallStatus(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="plan_calls")
    key = models.CharField(max_length=32)  # "part-3", "round-1-2": unique in the plan
    kind = models.CharField(max_length=8, choices=Kind.choices)
    position = models.PositiveIntegerField()  # the order of the calls in the plan
    first_passage = models.PositiveIntegerField(null=True, blank=True)  # a part's S range
    last_passage = models.PositiveIntegerField(null=True, blank=True)
    label = models.CharField(max_length=300, blank=True)  # what it reads, in words
    prompt_version = models.CharField(max_length=40, blank=True)
    status = models.CharField(max_length=16, choices=CallStatus.choices, default=CallStatus.PENDING)
    attempt_number = models.PositiveIntegerField(null=True, blank=True)  # who wrote the notes
    notes = models.TextField(blank=True)
    error_type = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    first_text_ms = models.FloatField(null=True, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    usage_source = models.CharField(max_length=16, blank=True)
    cost_micros = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["task", "position"]
        constraints = [models.UniqueConstraint(fields=["task", "key"], name="unique_plan_call")]

    def __str__(self) -> str:
        return f"{self.key} of {self.task_id}"
