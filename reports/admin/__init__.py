"""Django admin for staff: tasks with their attempts, events and timings, and budgets."""

from reports.admin import budgets, sharing, tasks, webhooks  # noqa: F401  (each registers its model admins)
