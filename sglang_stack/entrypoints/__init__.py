"""What the image runs: the server launcher (``serve``), the router (``router``), the health probe (``health``),
and what SGLang decides at our settings (``settings``, run by `invoke settings` in the image).

In-image code: the standard library only (tests/project/test_in_image.py). Keep this file free of imports.
"""
