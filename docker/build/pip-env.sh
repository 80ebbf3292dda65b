# Sourced by every download step of docker/Dockerfile, which mounts docker/build at /build for that step
# only: nothing of it reaches a layer.
#
# The CA bundle build secret, for hosts behind a TLS-inspecting proxy: pip and everything else that
# speaks TLS in the step trust it.
if [ -s /run/secrets/ca ]; then
    export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca
    echo "using the CA bundle build secret"
fi
# Where pip finds wheels: the index and the URLs of versions.lock, or with MIRROR=1 (`invoke build
# --mirror`) only the mirror's wheels/, each URL requirement rewritten by from_mirror to the mirror's
# file of the same name. pip checks the same sha256 either way.
if [ "${MIRROR:-0}" = 1 ]; then
    export PIP_NO_INDEX=1 PIP_FIND_LINKS=/mirror/wheels
    echo "installing from the mirror: no index, no URL"
    from_mirror() { sed -E 's#@ https?://[^ ]*/([^/ ]+) #@ file:///mirror/wheels/\1 #'; }
else
    from_mirror() { cat; }
fi
