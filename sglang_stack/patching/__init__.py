"""Patching SGLang: the fail-closed patch applier (``patches``) and the EAGLE-3 audit (``audit``).

Both also run inside the image's ``sglang`` stage, on the standard library alone: keep this
file free of imports.
"""
