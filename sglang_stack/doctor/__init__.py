"""`invoke doctor`: the host preflight. The checks (``checklist``), the facts they judge (``host``), what the
server is handed (``inputs``) and the result type (``checks``)."""
