# One way to write a moment, with seconds, wherever Django formats one by default (the
# admin's fields, lists and filters): "2026-12-02 00:58:10 UTC".
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
