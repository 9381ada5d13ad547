"""What every Reportline model admin's actions share: the selected ids are checked first."""

from __future__ import annotations

from django.contrib.admin import helpers
from django.core.exceptions import BadRequest, ValidationError


class CheckedSelectionMixin:
    """Answer 400 to an action whose selected ids are not ids of the model.

    Django filters by them as they are sent, so `abc` for a budget's number, or a task id
    that is not a UUID, would fail in the database as a 500.
    """

    def response_action(self, request, queryset, *args, **kwargs):
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                self.opts.pk.to_python(value)
            except ValidationError:
                raise BadRequest(
                    f"{value!r} is not the id of a {self.opts.verbose_name}."
                ) from None
        return super().response_action(request, queryset, *args, **kwargs)
