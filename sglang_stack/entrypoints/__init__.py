"""What the image runs: the server launcher (``serve``), the router (``router``) and the health probe (``health``).

In-image code: the standard library only (tests/test_in_image.py). Keep this file free of imports.
"""
