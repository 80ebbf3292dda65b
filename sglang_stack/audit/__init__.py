"""The EAGLE-3 readiness audit (``eagle3``): the call sites SGLang makes on a model (``callsites``), read from
the source (``source``) and checked against what Python builds (``runtime``, ``probe``, ``standins``).

In-image code: it runs in the image's ``sglang`` stage on the standard library only (tests/project/test_in_image.py).
Keep this file free of imports.
"""
