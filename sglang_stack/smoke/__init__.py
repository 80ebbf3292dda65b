"""The end-to-end checks: the daemonless container smoke (``container``), the whole runtime image built with
stand-ins for the bytes no CI machine can fetch (``runtime``, ``standins``)."""
