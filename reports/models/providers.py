"""What Reportline has learned about a provider's model, shared by every worker."""

from __future__ import annotations

from django.db import models


class ProviderFigures(models.Model):
    """One provider's model, as the calls to it showed it (docs/providers.md).

    `key` names the provider, its server and the model. Workers in any process read and
    update the same row, so what one learned every other uses.
    """

    key = models.CharField(max_length=400, unique=True)
    # Prompt tokens read a second before the first text (a moving average of the calls).
    reading_tokens_per_s = models.FloatField(null=True, blank=True)
    # How many calls the server says it runs at once (llama-server's slots); None: unsaid.
    slots = models.PositiveIntegerField(null=True, blank=True)
    # The adaptive limit on calls at once (additive increase, multiplicative decrease);
    # None until a call taught it something.
    limit = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "provider figures"

    def __str__(self) -> str:
        return self.key
