"""Building the image on the host: the Dockerfile render (``render``), the engine build (``build``), the local
store (``store``), the size budget (``size``), the mirror (``mirror``) and the check of a built image (``verify``).

``steps/`` holds what runs inside the build.
"""
