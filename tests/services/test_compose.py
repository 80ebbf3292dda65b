"""compose.yaml, .env.example and sglang_stack.services.compose.

The file is validated with a real validator: check-jsonschema (pinned in the dev
extras) and the official compose-spec JSON schema it vendors. Compose validates
after interpolation, so each scenario is resolved by `docker compose config` first,
then validated; the uninterpolated file is validated too. Compose reads every file
here (tests/conftest.py's ``compose`` fixture skips, or fails under CI, without it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.services import compose, variables
from sglang_stack.services import composefile
from sglang_stack.services import progress
from sglang_stack.entrypoints import health
from sglang_stack.errors import UserError

import fake_cli

COMPOSE_YAML = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"

# check-jsonschema 0.39.0 vendors the compose-spec schema (compose-spec/compose-spec's
# schema/compose-spec.json, JSON Schema draft 2020-12) at this hash. A new pin of
# check-jsonschema that changes the schema fails here, so the change is noticed.
COMPOSE_SPEC_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"

SHARED_WITH_BENCH = {
    "SGLANG_STACK_IMAGE": None,
    "MODEL_DIR": None,
    "DRAFT_MODEL_DIR": None,
    "BIND_ADDRESS": "127.0.0.1",
    "BASELINE_PORT": "30000",
    "EAGLE3_PORT": "30001",
    "TP_SIZE": "8",
    "SGLANG_SPEC_NUM_STEPS": "3",
    "SGLANG_SPEC_EAGLE_TOPK": "1",
    "SGLANG_SPEC_NUM_DRAFT_TOKENS": "4",
    "SGLANG_API_KEY_FILE": None,
    "HF_TOKEN_FILE": None,
}


pytestmark = pytest.mark.usefixtures("compose")


def env_of(**values: str) -> variables.Environment:
    """An Environment with only these values, as if from a shell with nothing else set, and no .env."""
    return variables.Environment(values, {k: "shell" for k in values})


def resolved(**values: str) -> dict:
    """``docker compose config`` of compose.yaml alone with these variables."""
    return composefile.project(env_of(**values), (COMPOSE_YAML,)).config


def uninterpolated() -> dict:
    return composefile.project(env_of(), (COMPOSE_YAML,)).raw()


def gpu_services(config: dict) -> list[tuple[str, dict]]:
    """The servers: the services whose x-sglang-stack role is server (SGLang on GPUs)."""
    return [(name, spec) for name, spec in config["services"].items() if spec["x-sglang-stack"]["role"] == "server"]


def command_of(config: dict, name: str) -> list[str]:
    return list(config["services"][name]["command"])


def flag_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


# --- validation against the compose-spec schema ------------------------------------------------


def _schema_path() -> Path:
    import check_jsonschema

    return Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "compose-spec.json"


def validate(document: dict, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    exe = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(path)], capture_output=True, text=True, timeout=120
    )


def test_vendored_schema_is_the_recorded_one():
    digest = hashlib.sha256(_schema_path().read_bytes()).hexdigest()
    assert digest == COMPOSE_SPEC_SHA256, f"check-jsonschema's compose-spec schema changed: {digest}; review and re-record"


SCENARIOS = {
    "defaults": {"MODEL_DIR": "/srv/models/k", "DRAFT_MODEL_DIR": "/srv/models/d"},
    "everything-set": {
        "MODEL_DIR": "/m",
        "DRAFT_MODEL_DIR": "/d",
        "GPU_IDS": "0,1,2,3",
        "TP_SIZE": "4",
        "BIND_ADDRESS": "0.0.0.0",
        "SGLANG_API_KEY_FILE": "secrets/sglang_api_key",
        "SGLANG_EXTRA_ARGS": "--mem-fraction-static 0.85 --enable-torch-symm-mem",
        "HEALTH_START_PERIOD": "45m",
        "NCCL_P2P_LEVEL": "SYS",
    },
}


@pytest.mark.schema
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_compose_spec_schema_accepts_the_file(scenario, tmp_path):
    raw = validate(uninterpolated(), tmp_path, "raw")
    assert raw.returncode == 0, f"compose.yaml (not interpolated) fails the compose-spec schema:\n{raw.stdout}{raw.stderr}"
    done = validate(resolved(**SCENARIOS[scenario]), tmp_path, scenario)
    assert done.returncode == 0, f"compose.yaml interpolated for {scenario} fails the schema:\n{done.stdout}{done.stderr}"


@pytest.mark.schema
def test_compose_spec_schema_accepts_the_env_example(tmp_path):
    env = variables.environment(ENV_EXAMPLE, {"PATH": os.environ["PATH"]})
    done = validate(composefile.project(env, (COMPOSE_YAML,)).config, tmp_path, "env-example")
    assert done.returncode == 0, f"compose.yaml with .env.example's values fails the schema:\n{done.stdout}"


@pytest.mark.schema
def test_validator_catches_mistakes(tmp_path):
    """The validator can fail: typical slips in a GPU compose file are rejected."""
    broken = resolved(MODEL_DIR="/m")
    svc = broken["services"]["eagle3"]
    svc["healthcheck"]["start-period"] = svc["healthcheck"].pop("start_period")
    result = validate(broken, tmp_path, "broken-healthcheck")
    assert result.returncode != 0, "a misspelled healthcheck key must fail the compose-spec schema"
    broken = resolved(MODEL_DIR="/m")
    broken["services"]["baseline"]["deploy"]["resources"]["reservations"]["devices"][0]["gpus"] = "all"
    result = validate(broken, tmp_path, "broken-devices")
    assert result.returncode != 0, "an unknown key in a device reservation must fail the compose-spec schema"


# --- semantics -----------------------------------------------------------------------------


def test_services_and_profiles():
    proj = composefile.project(env_of(), (COMPOSE_YAML,))
    config = proj.config
    assert proj.names(composefile.SERVER) == ("baseline", "eagle3"), f"servers: {proj.names(composefile.SERVER)}"
    assert proj.names(composefile.ROUTER) == ("router",), f"routers: {proj.names(composefile.ROUTER)}"
    assert proj.default == "eagle3", "invoke doctor and acceptance take eagle3 when none is named"
    for name, spec in config["services"].items():
        # A profile per service: plain `docker compose up` starts neither (both want every GPU),
        # and `docker compose up eagle3` activates eagle3's profile by naming the service.
        assert spec.get("profiles") == [name], f"{name} must sit in the profile named after it: {spec.get('profiles')}"


def test_image_and_build():
    for name, spec in gpu_services(resolved()):
        assert spec["image"] == "sglang-stack:0.5.9-cu130", f"{name}: default image must be invoke build's tag: {spec['image']}"
        assert spec["build"] == {"context": str(ROOT), "dockerfile": "docker/Dockerfile", "target": "runtime"}, (
            f"{name}: build must point at docker/Dockerfile's runtime stage: {spec['build']}"
        )
    profiled = resolved(SGLANG_PROFILE="0.5.23")["services"]
    for name in ("baseline", "eagle3", "router"):
        assert profiled[name]["build"]["dockerfile"] == "profiles/0.5.23/docker/Dockerfile", (
            f"{name}: compose must build the Dockerfile of the profile it tags: {profiled[name]['build']}")
    assert profiled["eagle3"]["image"] == "sglang-stack:0.5.23-cu130", profiled["eagle3"]["image"]
    config = resolved(SGLANG_STACK_IMAGE="registry.example/sglang-stack:test")
    assert config["services"]["eagle3"]["image"] == "registry.example/sglang-stack:test", "SGLANG_STACK_IMAGE must set the image"


def test_gpu_reservation():
    for name, spec in gpu_services(resolved()):
        devices = spec["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, f"{name}: expected one device reservation: {devices}"
        device = devices[0]
        assert device["driver"] == "nvidia", f"{name}: GPUs must be reserved with the nvidia driver: {device}"
        assert "gpu" in device["capabilities"], f"{name}: the reservation needs the gpu capability: {device}"
        assert device["device_ids"] == ["all"], f"{name}: all GPUs by default: {device}"
        assert "count" not in device, f"{name}: Docker refuses count together with device_ids: {device}"
    chosen = resolved(GPU_IDS="0,1,2,3")["services"]["eagle3"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert chosen["device_ids"] == ["0,1,2,3"], f"GPU_IDS must choose the GPUs: {chosen}"


def test_runtime_settings():
    for name, spec in gpu_services(resolved()):
        assert "ipc" not in spec and spec["shm_size"] == str(64 << 30), f"{name}: the container's own /dev/shm, 64g by default"
        assert spec["cap_drop"] == ["ALL"] and spec["security_opt"] == ["no-new-privileges:true"], name
        assert spec["read_only"] is True and spec["tmpfs"] == ["/tmp:size=8g,mode=1777"], name
        assert spec["ulimits"]["memlock"] == -1, f"{name}: memlock must be unlimited: {spec['ulimits']}"
        assert spec["ulimits"]["stack"] == 67108864, f"{name}: stack must be 64 MiB: {spec['ulimits']}"
        assert spec.get("init") is True, f"{name}: an init process must reap SGLang's forked workers"


def test_model_mounts_read_only_and_cache_volume():
    config = resolved(MODEL_DIR="/srv/k", DRAFT_MODEL_DIR="/srv/d")
    for name, spec in gpu_services(config):
        mounts = {m["target"]: m for m in spec["volumes"]}
        model = mounts.get("/models/target")
        assert model and model["type"] == "bind" and model["source"] == "/srv/k", f"{name}: MODEL_DIR mount: {model}"
        assert model.get("read_only") is True, f"{name}: the model must be mounted read-only: {model}"
        cache = mounts.get("/home/sglang/.cache")
        assert cache and cache["type"] == "volume" and cache["source"] in config["volumes"], f"{name}: cache volume: {cache}"
        assert spec["environment"]["HF_HOME"].startswith("/home/sglang/.cache/"), f"{name}: HF_HOME must live in the cache volume"
    draft = {m["target"]: m for m in config["services"]["eagle3"]["volumes"]}.get("/models/draft")
    assert draft and draft["source"] == "/srv/d" and draft.get("read_only") is True, f"eagle3 drafter mount: {draft}"
    assert "/models/draft" not in {m["target"] for m in config["services"]["baseline"]["volumes"]}, "baseline needs no drafter"


def test_healthcheck_timings():
    probe_timeout = health.default_timeout({})
    for name, spec in gpu_services(resolved()):
        hc = spec["healthcheck"]
        assert hc["test"] == ["CMD", "python3", "-m", "sglang_stack.entrypoints.health"], f"{name}: must run the image's probe: {hc['test']}"
        interval = composefile.parse_duration(hc["interval"])
        timeout = composefile.parse_duration(hc["timeout"])
        start = composefile.parse_duration(hc["start_period"])
        assert 10 <= interval <= 20, f"{name}: interval should be about 15 s, got {hc['interval']}"
        assert probe_timeout > 20, f"the probe's timeout {probe_timeout} must exceed SGLang's 20 s health timeout"
        assert timeout > probe_timeout, f"{name}: Docker's timeout {hc['timeout']} must exceed the probe's {probe_timeout}s"
        assert start >= 20 * 60, f"{name}: start_period {hc['start_period']} is too short for a 1T-parameter load"
    longer = resolved(HEALTH_START_PERIOD="1h")["services"]["eagle3"]["healthcheck"]["start_period"]
    assert composefile.parse_duration(longer) == 3600, f"HEALTH_START_PERIOD must set start_period: {longer}"


BASELINE_FLAGS = {
    "--model-path": "/models/target",
    "--tp": "8",
    "--tool-call-parser": "kimi_k2",
    "--reasoning-parser": "kimi_k2",
    "--host": "0.0.0.0",
    "--port": "30000",
}


def test_baseline_command():
    argv = command_of(resolved(), "baseline")
    for flag, value in BASELINE_FLAGS.items():
        assert flag_value(argv, flag) == value, f"baseline: {flag} should be {value}: {argv}"
    assert "--trust-remote-code" in argv, f"baseline needs --trust-remote-code for Kimi-K2.5: {argv}"
    assert not [a for a in argv if a.startswith("--speculative")], f"baseline must not speculate: {argv}"
    assert not [a for a in argv if a.startswith("--api-key")], f"the key is never a flag: {argv}"


def test_eagle3_command_and_overrides():
    baseline = command_of(resolved(), "baseline")
    argv = command_of(resolved(), "eagle3")
    assert argv[: len(baseline)] == baseline, f"eagle3 must start with baseline's flags:\n{baseline}\n{argv}"
    expected = {
        "--speculative-algorithm": "EAGLE3",
        "--speculative-draft-model-path": "/models/draft",
        "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4",
    }
    for flag, value in expected.items():
        assert flag_value(argv, flag) == value, f"eagle3: {flag} should be {value}: {argv}"
    tuned = command_of(
        resolved(SGLANG_SPEC_NUM_STEPS="2", SGLANG_SPEC_EAGLE_TOPK="4", SGLANG_SPEC_NUM_DRAFT_TOKENS="3", TP_SIZE="4"),
        "eagle3",
    )
    got = [flag_value(tuned, f) for f in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--tp")]
    assert got == ["2", "4", "3", "4"], f"every EAGLE-3 number and TP_SIZE must come from .env: {tuned}"


def test_the_api_key_is_a_secret_file_never_a_flag_or_a_variable():
    config = resolved(SGLANG_API_KEY_FILE="/etc/keys/api", HF_TOKEN_FILE="/etc/keys/hub",
                      SGLANG_EXTRA_ARGS="--mem-fraction-static 0.85")
    assert config["secrets"]["sglang_api_key"]["file"] == "/etc/keys/api", config.get("secrets")
    for name in config["services"]:
        spec = config["services"][name]
        argv = list(spec["command"])
        assert not [a for a in argv if "keys" in a or a.startswith("--api-key")], f"{name}: the key is on the command line: {argv}"
        assert "SGLANG_API_KEY" not in (spec.get("environment") or {}), f"{name}: the key would show in docker inspect"
        assert "sglang_api_key" in [x["source"] for x in spec.get("secrets") or []], f"{name}: the key does not reach the container"
    assert config["secrets"]["hf_token"]["file"] == "/etc/keys/hub", config.get("secrets")
    for name, spec in gpu_services(config):
        assert "HF_TOKEN" not in (spec.get("environment") or {}), f"{name}: the Hub token would show in docker inspect"
        assert "hf_token" in [x["source"] for x in spec.get("secrets") or []], f"{name}: the Hub token does not reach the container"
        assert spec["environment"]["HF_TOKEN_PATH"] == "/run/secrets/hf_token", f"{name}: huggingface_hub would not find it"
    argv = command_of(config, "eagle3")
    assert argv[-2:] == ["--mem-fraction-static", "0.85"], f"SGLANG_EXTRA_ARGS must be appended: {argv}"


def test_without_a_key_or_a_token_the_secrets_are_empty_files():
    """A fresh clone has no .env: each secret is /dev/null, so Compose has a file and the server no key."""
    config = resolved()
    assert {k: v["file"] for k, v in config["secrets"].items()} == {"sglang_api_key": "/dev/null", "hf_token": "/dev/null"}, \
        config["secrets"]


def test_the_clients_read_the_key_file_the_server_gets(tmp_path):
    from sglang_stack.services import variables

    key = tmp_path / "api"
    key.write_text("k-123\n")
    env = variables.Environment({"SGLANG_API_KEY_FILE": str(key)}, {"SGLANG_API_KEY_FILE": ".env:3"})
    # a fresh Environment for each read: a project is resolved once per Environment
    assert composefile.api_key(env) == "k-123", "clients send what the entrypoint reads"
    assert composefile.api_key(variables.Environment({})) is None, "no file: no key"
    key.write_text("two words\n")
    with pytest.raises(UserError) as err:
        composefile.api_key(variables.Environment(dict(env.values), dict(env.origin)))
    assert str(err.value).startswith(f"SGLANG_API_KEY_FILE={key} (.env:3): ") and "whitespace" in str(err.value), err.value
    missing = variables.Environment({"SGLANG_API_KEY_FILE": str(tmp_path / "gone")})
    with pytest.raises(UserError, match="no such file"):
        composefile.api_key(missing)


def published(spec: dict) -> list[str]:
    return [f"{p.get('host_ip')}:{p.get('published')}:{p.get('target')}" for p in spec["ports"]]


def test_ports_bind_loopback_by_default():
    config = resolved()
    assert published(config["services"]["baseline"]) == ["127.0.0.1:30000:30000"], config["services"]["baseline"]["ports"]
    assert published(config["services"]["eagle3"]) == ["127.0.0.1:30001:30000"], config["services"]["eagle3"]["ports"]
    moved = resolved(BIND_ADDRESS="0.0.0.0", EAGLE3_PORT="31001")
    assert published(moved["services"]["eagle3"]) == ["0.0.0.0:31001:30000"], f"BIND_ADDRESS/EAGLE3_PORT: {moved['services']['eagle3']['ports']}"
    proj = composefile.project(env_of(), (COMPOSE_YAML,))
    assert [proj.port_variable(n, 30000) for n in ("baseline", "eagle3")] == ["BASELINE_PORT", "EAGLE3_PORT"], \
        "each server's port variable, read from its own ports entry"
    assert proj.port_variable("router", 30080) == "ROUTER_PORT"
    for name, spec in gpu_services(config):
        assert "SGLANG_PORT" not in spec["environment"], \
            f"{name}: SGLANG_PORT is SGLang's: with TP > 1 its message queue would bind the API port first"


def test_nccl_and_runtime_knobs_reach_the_container():
    spec = resolved(NCCL_DEBUG="INFO")["services"]["eagle3"]
    env = spec["environment"]
    assert env["NCCL_DEBUG"] == "INFO", f"NCCL_DEBUG must be settable from .env: {env.get('NCCL_DEBUG')}"
    for knob in ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "PYTORCH_CUDA_ALLOC_CONF"):
        assert knob in env and env[knob] is None, f"{knob} must be passed through from .env when set (no value in compose.yaml)"
    assert env["SGLANG_HEALTH_CHECK_TIMEOUT"] == "20", "the probe must see SGLang's health timeout"


def test_no_secret_values_in_the_files():
    raw = uninterpolated()
    text = COMPOSE_YAML.read_text()
    for name, spec in raw["services"].items():
        env = spec.get("environment") or {}
        for secret in ("HF_TOKEN", "SGLANG_API_KEY"):
            assert secret not in env, f"{name}: {secret} must never be a variable of the container"
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text), "compose.yaml contains something that looks like a Hugging Face token"
    assert raw["secrets"]["sglang_api_key"]["file"] == "${SGLANG_API_KEY_FILE:-/dev/null}", \
        "the API key must come from the file .env names, as a secret"
    for line in ENV_EXAMPLE.read_text().splitlines():
        assert not re.match(r"\s*#?\s*(HF_TOKEN|SGLANG_API_KEY)\s*=", line), f".env.example holds a secret itself: {line!r}"
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".env" in ignored and "/secrets/" in ignored, ".env and secrets/ hold secrets and must be git-ignored"


def _compose_variables() -> set[str]:
    """What compose.yaml interpolates, by Compose's uninterpolated output, and what it passes through unset."""
    names = variables.referenced(env_of())
    raw = uninterpolated()
    for spec in raw["services"].values():
        names |= {k for k, v in (spec.get("environment") or {}).items() if v is None}
    return names


def _documented() -> dict[str, str]:
    """Every VAR in .env.example, set (VAR=x) or shown commented (# VAR=x), with its value."""
    found = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.match(r"#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            found.setdefault(match.group(1), match.group(2).strip())
    return found


def test_every_variable_is_documented():
    used, documented = _compose_variables(), set(_documented())
    assert not used - documented, f"variables compose.yaml uses but .env.example does not document: {sorted(used - documented)}"
    # Compose's own settings, which it reads from .env itself (docs.docker.com/compose/environment-variables/envvars/).
    compose_cli = {"COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PATH_SEPARATOR", "COMPOSE_PROFILES"}
    ignored = documented - used - compose_cli
    assert not ignored, f".env.example documents variables compose.yaml ignores: {sorted(ignored)}"
    missing = set(SHARED_WITH_BENCH) - used
    assert not missing, f"variable names shared with the bench task are missing: {sorted(missing)}"


def test_env_example_shows_the_real_defaults():
    text, defaults = COMPOSE_YAML.read_text(), {}
    innermost = re.compile(r"\$\{([A-Z][A-Z0-9_]*):-([^${}]*)\}")
    while innermost.search(text):  # a default may hold another variable's: ${A:-x${B:-y}}, innermost first
        text = innermost.sub(lambda m: defaults.setdefault(m[1], m[2]), text)
    documented = _documented()
    for name, default in defaults.items():
        if name in ("MODEL_DIR", "DRAFT_MODEL_DIR", "SGLANG_EXTRA_ARGS", "ROUTER_WORKER_URLS", "ROUTER_EXTRA_ARGS", "DIST_INIT_ADDR",
                    "SGLANG_API_KEY_FILE", "HF_TOKEN_FILE", "SGLANG_PROFILE"):
            # .env.example gives an example value / empty value on purpose (the secrets: a file to make; the profile:
            # unset is the root's, and its name set would make compose build profiles/NAME/, which only others have)
            continue
        assert documented.get(name) == default, f".env.example shows {name}={documented.get(name)!r}, compose.yaml's default is {default!r}"
    for name, default in SHARED_WITH_BENCH.items():
        if default is not None:
            assert defaults.get(name) == default, f"shared variable {name} must default to {default}, not {defaults.get(name)}"


# --- resolving a service ---------------------------------------------------------------------


def test_service_resolution():
    svc = composefile.service("eagle3", env_of(MODEL_DIR="/srv/k", DRAFT_MODEL_DIR="/srv/d", EAGLE3_PORT="31001", TP_SIZE="4"))
    assert (svc.model_dir, svc.draft_dir) == (Path("/srv/k"), Path("/srv/d")), f"mounts: {svc.model_dir} {svc.draft_dir}"
    assert (svc.bind_address, svc.host_port, svc.tp_size) == ("127.0.0.1", 31001, 4), f"resolved {svc}"
    assert svc.url == "http://127.0.0.1:31001", svc.url
    base = composefile.service("baseline", env_of(MODEL_DIR="models/k"))
    assert base.draft_dir is None and base.model_dir == ROOT / "models" / "k", f"relative paths are relative to the project: {base.model_dir}"
    assert composefile.service("baseline", env_of(SGLANG_EXTRA_ARGS="--tp 2")).tp_size == 2, "a --tp in SGLANG_EXTRA_ARGS wins, as in argparse"
    assert composefile.endpoint("eagle3", env_of(BIND_ADDRESS="0.0.0.0")) == "http://127.0.0.1:30001", "0.0.0.0 is reached via loopback"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"TP_SIZE": "eight"}, "TP_SIZE=eight (shell): must be a positive integer"),
        ({"TP_SIZE": "0"}, "TP_SIZE=0 (shell): must be a positive integer"),
        ({"EAGLE3_PORT": "70000"}, "EAGLE3_PORT=70000 (shell): Invalid hostPort: 70000"),
        # Docker picks the port for 0 or a range: the service's URL would be a guess.
        ({"EAGLE3_PORT": "0"}, "EAGLE3_PORT=0 (shell): publishes 0, and Docker would pick the port"),
        ({"EAGLE3_PORT": "31001-31005"}, "EAGLE3_PORT=31001-31005 (shell): publishes 31001-31005, and Docker would"),
        ({"SGLANG_SPEC_NUM_STEPS": "x"}, "SGLANG_SPEC_NUM_STEPS=x (shell): must be a positive integer"),
        ({"GPU_IDS": "0, 1"}, "GPU_IDS=0, 1 (shell)"),
        ({"GPU_IDS": "0,1,0"}, "GPU_IDS=0,1,0 (shell): names GPU 0 twice; each GPU once"),
        ({"BIND_ADDRESS": "localhost"}, "BIND_ADDRESS=localhost (shell): Invalid ip address: localhost"),
        # Compose names the first service it fails on, in its own (map) order: either server that reads the variable.
        ({"SGLANG_EXTRA_ARGS": '--x "open'}, re.compile(r'SGLANG_EXTRA_ARGS=--x "open \(shell\): services\[(baseline|eagle3)\]\.command: invalid')),
        ({"SHM_SIZE": "lots"}, "SHM_SIZE=lots (shell): services["),
        # Compose's "error while interpolating" names the field only; the variable that put the value there is named.
        ({"PIDS_LIMIT": "many"}, re.compile(r"PIDS_LIMIT=many \(shell\): services\.(baseline|eagle3)\.pids_limit: "
                                            r"failed to cast to expected type")),
    ],
)
def test_bad_values_are_one_line_errors(values, message):
    with pytest.raises(UserError) as err:
        composefile.service("eagle3", env_of(**values), (COMPOSE_YAML,))
    found = message.search(str(err.value)) if isinstance(message, re.Pattern) else message in str(err.value)
    assert found, f"expected {message!r} in {err.value}"
    assert "\n" not in str(err.value), f"errors must be one line: {err.value!r}"


def test_cli_bad_value_no_traceback():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "TP_", "EAGLE3_"))}
    env.update(TP_SIZE="many", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "sglang_stack.services.compose", "eagle3"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, f"a bad TP_SIZE must exit 2, got {proc.returncode}"
    assert proc.stderr.strip() == "error: TP_SIZE=many (shell): must be a positive integer", f"stderr: {proc.stderr!r}"


def test_unknown_service():
    with pytest.raises(UserError, match="unknown service 'gpt': choose one of baseline, eagle3 "):
        composefile.service("gpt", env_of(), (COMPOSE_YAML,))
    with pytest.raises(UserError, match="'router' is a router of compose.yaml, not a server"):
        composefile.service("router", env_of(), (COMPOSE_YAML,))


def test_wait_timeout_follows_the_healthcheck():
    svc = composefile.service("eagle3", env_of(HEALTH_START_PERIOD="30m", HEALTH_INTERVAL="15s", HEALTH_TIMEOUT="40s"))
    assert composefile.wait_timeout(svc) == 1800 + 3 * 55 + 120, f"wait timeout {composefile.wait_timeout(svc)}"


@pytest.mark.parametrize("text, seconds", [("15s", 15), ("30m", 1800), ("1h30m", 5400), ("30m0s", 1800), ("500ms", 0.5), ("15", None), ("s", None)])
def test_parse_duration(text, seconds):
    assert composefile.parse_duration(text) == seconds, f"{text!r} -> {composefile.parse_duration(text)}"


# --- docker compose ps and the CLI wrappers ----------------------------------------------------

ROW_HEALTHY = {
    "Service": "eagle3",
    "Name": "sglang-stack-eagle3-1",
    "State": "running",
    "Health": "healthy",
    "Status": "Up 9 minutes (healthy)",
    "ExitCode": 0,
    "Publishers": [{"URL": "127.0.0.1", "TargetPort": 30000, "PublishedPort": 30001, "Protocol": "tcp"}],
}


def test_parse_ps_both_formats():
    other = {**ROW_HEALTHY, "Service": "baseline", "State": "exited", "Health": "", "ExitCode": 137}
    lines = json.dumps(ROW_HEALTHY) + "\n" + json.dumps(other) + "\n"
    assert progress.parse_ps(lines) == [ROW_HEALTHY, other], "one JSON object per line (Compose >= 2.21)"
    assert progress.parse_ps(json.dumps([ROW_HEALTHY, other])) == [ROW_HEALTHY, other], "a JSON array (older Compose)"
    assert progress.parse_ps("") == [], "no containers"
    with pytest.raises(UserError, match="line 2 is not JSON"):
        progress.parse_ps(json.dumps(ROW_HEALTHY) + "\nWARN something\n")
    assert "exited (137)" in progress.describe(other), progress.describe(other)
    line = progress.describe(ROW_HEALTHY)
    assert "running (healthy)" in line and "127.0.0.1:30001->30000" in line, line


def test_compose_argv_names_project_and_profiles():
    argv = compose.compose_argv(DOCKER, composefile.project(env_of(), (COMPOSE_YAML,)), "ps")
    assert argv[:2] == ["docker", "compose"], argv
    assert "--file" not in argv, f"Compose picks the files itself (COMPOSE_FILE, compose.override.yaml): {argv}"
    assert argv[argv.index("--project-directory") + 1] == str(ROOT), argv
    profiles = [argv[i + 1] for i, a in enumerate(argv) if a == "--profile"]
    assert profiles == ["baseline", "eagle3", "router"], f"down/ps must see every profiled service: {argv}"


def test_missing_compose_plugin_is_one_line_naming_the_package(tmp_path):
    """A docker CLI without the compose plugin: a state the engine here cannot be put in, hence a stand-in CLI."""
    fake = fake_cli.install(tmp_path / "bin", info=fake_cli.PLAIN_INFO)  # no compose_version: no plugin
    env = {**fake, "HOME": str(tmp_path)}
    for task in (["status"], ["down"], ["logs", "eagle3", "--no-follow"]):
        proc = subprocess.run([sys.executable, "-m", "invoke", *task], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: docker compose (Compose v2) is not installed") and "docker-compose-plugin" in last, last


def test_the_files_a_message_names_follow_compose_file(tmp_path):
    proj = composefile.project(env_of(COMPOSE_FILE="compose.yaml:compose.multinode.yaml"))
    assert proj.compose_files() == (COMPOSE_YAML, ROOT / "compose.multinode.yaml"), proj.compose_files()
    proj = composefile.project(env_of(COMPOSE_FILE="compose.yaml;compose.rdma.yaml", COMPOSE_PATH_SEPARATOR=";"))
    assert proj.compose_files()[-1] == ROOT / "compose.rdma.yaml", proj.compose_files()
    with pytest.raises(UserError) as err:
        composefile.project(env_of(COMPOSE_FILE="compose.yaml:missing.yaml"))
    assert "missing.yaml" in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize(
    "log, latest",
    [
        ("a\nb\n", "b"),
        ("Loading shards:  10% 6/64\rLoading shards:  50% 32/64\n", "Loading shards:  50% 32/64"),
        ("\x1b[2Kserver up\n\x1b[2K\n", "server up"),
        ("\x1b[2Kstep 1\rstep 2\r\n", "step 2"),
        ("", ""),
    ],
)
def test_latest_state_of_a_log(log, latest):
    assert progress.latest_state(log) == latest, f"{log!r}"


def test_logs_refuses_an_unknown_service():
    with pytest.raises(UserError, match="unknown service"):
        compose.logs(DOCKER, "nope", follow=False, tail="1")


def test_a_compose_that_outlives_its_time_leaves_no_process(tmp_path, monkeypatch):
    """The docker CLI runs Compose as a child of its own: at the timeout the whole group ends, not the CLI alone.
    A stand-in CLI that starts such a child and waits stands in for a Compose that never finishes."""
    import time

    marker = f"sglang-stack-test-{os.getpid()}-{time.monotonic_ns()}"
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nsh -c 'sleep 300 & wait' {marker}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(variables, "COMPOSE_TIMEOUT", 1)
    with pytest.raises(UserError, match="did not finish within 1 s"):
        variables.config(["config"], variables.Environment({}))
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"
