"""Measuring running servers: SGLang's HTTP API from the host (``client``), SGLang's own benchmark as the load
(``upstream``, ``rounds``), a run (``measure``), the speculative-settings sweep (``sweep``), the verdict (``pays``),
and the report and plot (``report``, ``plot``)."""
