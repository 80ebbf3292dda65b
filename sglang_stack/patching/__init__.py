"""The patch series in ``patches/``: read and applied fail-closed (``patches``), parsed (``diff``), rebased on an
edited tree (``refresh``).

In-image code: ``patches`` and ``diff`` run in the image's ``sglang`` stage on the standard library only
(tests/project/test_in_image.py). Keep this file free of imports.
"""
