"""Signed webhooks when a task ends (docs/webhooks.md).

* `endpoints` — registering, listing and removing a user's endpoints, and their secrets.
* `sealing` — signing secrets sealed at rest under a key derived from SECRET_KEY.
* `addresses` — which addresses an endpoint may reach (no loopback, private, metadata…).
* `outbox` — the delivery rows written in the transaction that ends a task.
* `delivery` — claiming due rows, one signed POST, and what its answer does to the row.
* `sender` — the worker's loop that sends, a bounded number at once, off its event loop.
"""
