"""Images leave the host: pushed by digest, signed, their SBOM and the build's own verdicts attested
(`invoke publish`), checked from a registry or an offline bundle (`invoke verify --key`, `invoke bundle`).
cosign does the signing and the checking; see docs/publish.md."""
