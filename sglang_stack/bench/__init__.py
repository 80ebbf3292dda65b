"""Measuring running servers: the streaming client (``client``), the benchmark (``measure``),
the speculative-settings sweep (``sweep``), and the report and plot (``report``, ``plot``)."""
