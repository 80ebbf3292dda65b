"""versions.lock and the requirement files made from it: the lock itself (``lockfile``), its schema, the
resolver (``resolve``), PyPI's record of each release (``releases``), the artifacts' hashes (``artifacts``) and
known advisories (``advisories``)."""
