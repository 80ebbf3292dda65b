"""Building the image: the lock (``lock``), the Dockerfile render (``render``), the engine build (``build``)
and the daemonless container smoke test (``smoke``)."""
