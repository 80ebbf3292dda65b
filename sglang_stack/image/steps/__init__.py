"""The build steps that run inside the image build: pyc, slim, sbom, toolchain, depcheck, binaries, aot,
envaudit and inventory, each a ``python3 -m`` command the Dockerfile calls.

In-image code: the standard library only (tests/project/test_in_image.py). Keep this file free of imports.
"""
