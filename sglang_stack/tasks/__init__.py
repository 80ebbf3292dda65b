"""Every `invoke` task, one module per concern; `ns` (built here) is what the root tasks.py hands Invoke."""
