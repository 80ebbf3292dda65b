"""The services on the host: compose.yaml (``compose``), the settings SGLang resolves (``settings``, ``derive``),
the models (``models``), the Kubernetes manifests (``k8s``) and the EAGLE-3 acceptance run (``acceptance``)."""
