"""Running the services: compose.yaml as the host sees it (``compose``), the host preflight
(``doctor``) and the in-image health probe (``health``).

``health`` also runs inside the image, on the standard library alone: keep this file free of imports.
"""
