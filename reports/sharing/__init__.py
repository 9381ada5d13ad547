"""Read-only share links of a finished report (docs/sharing.md)."""
